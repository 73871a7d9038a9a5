#!/usr/bin/env bash
# The main job, end to end on the embedded defaults: doctor -> profile -> plan -> run (all modes) -> report.
set -euo pipefail
XOVER=.venv/bin/xover
RECIPES=(resnet-synthetic mlp-synthetic transformer-chars mlp-balanced)
ITERATIONS=${XOVER_DEMO_ITERATIONS:-60}

$XOVER doctor
LINK=()
if $XOVER doctor --json | .venv/bin/python -c 'import json,sys; sys.exit(0 if {c["name"]: c for c in json.load(sys.stdin)["checks"]}["bandwidth emulation"]["ok"] else 1)'; then
  LINK=(--bandwidth 1gbit)
  echo "== network: an emulated 1 Gbit/s link (tc tbf in a private network namespace)"
else
  echo "== network: bandwidth emulation is NOT available here; jobs use the host network as it is"
fi
DEVICES=$(.venv/bin/python -c 'from xover.devices import local_device_count; print(local_device_count()[1])')

echo "== profile: each recipe alone"
$XOVER profile "${RECIPES[@]}" "${LINK[@]}"
echo "== plan: group complementary jobs for $DEVICES devices"
$XOVER plan "${RECIPES[@]}" --devices "$DEVICES" "${LINK[@]}" --out results/demo-plan.json
echo "== run: the plan in the three modes ($ITERATIONS iterations per job)"
$XOVER run results/demo-plan.json --mode all --iterations "$ITERATIONS" "${LINK[@]}" || true
echo "== report"
$XOVER report latest
$XOVER report latest --format html
