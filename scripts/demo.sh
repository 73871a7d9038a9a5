#!/usr/bin/env bash
# The main job, end to end: doctor -> profile -> plan -> run (as planned: each group in the way the plan picked,
# adaptive where it picked it; then its jobs one after another, as a schedule; then every mode and both turn
# policies) -> the plan's run against one after another, both measured -> report.
# On an emulated two-host cluster where one can be built (root), else on one machine with a shaped link.
set -euo pipefail
XOVER=.venv/bin/xover
PY=.venv/bin/python
# built-in recipes, and a job file for an unmodified DistributedDataParallel script (recipes/examples/ddp_digits.py)
RECIPES=(resnet-synthetic mlp-synthetic transformer-chars mlp-balanced recipes/examples/ddp-digits.toml)
SECONDS_EACH=${XOVER_DEMO_SECONDS:-15}

$XOVER doctor || true
HOSTS=()
LINK=()
cluster_unavailable=$($PY -c 'from xover.emulation import cluster
problems = cluster.missing_requirements()
print("; ".join(problems) if problems else "a cluster is already up (xover cluster down)" if cluster.read_state() else "")')
if [ -z "$cluster_unavailable" ]; then
  $XOVER cluster up --hosts 2 --devices-per-host 1 --bandwidth 1gbit
  trap '$XOVER cluster down >/dev/null || true' EXIT
  HOSTS=(-H xo-h1:1,xo-h2:1)
  echo "== network: an emulated cluster of two hosts, each NIC shaped to 1 Gbit/s; every job spans both hosts"
elif $XOVER doctor --json | $PY -c 'import json,sys; sys.exit(0 if {c["name"]: c for c in json.load(sys.stdin)["checks"]}["bandwidth emulation"]["ok"] else 1)'; then
  LINK=(--bandwidth 1gbit)
  echo "== network: NO emulated cluster here ($cluster_unavailable); falling back to this machine alone,"
  echo "   its jobs sharing one emulated 1 Gbit/s link (tc tbf in a private network namespace)"
else
  echo "== network: NO emulated cluster ($cluster_unavailable) and NO link emulation here:"
  echo "   jobs use the host network as it is, so communication is only memory copies"
fi
if [ ${#HOSTS[@]} -gt 0 ]; then WHERE=("${HOSTS[@]}"); else WHERE=(--devices "$($PY -c 'from xover.devices import local_device_count; print(local_device_count()[1])')"); fi

echo "== profile: each job alone (the script through the shims that run it unmodified), then once next to a"
echo "   reference partner (its interference)"
$XOVER profile "${RECIPES[@]}" "${HOSTS[@]}" "${LINK[@]}"
echo "== plan: group complementary jobs, and pick each group's way of sharing: turns or none where one is clearly"
echo "   ahead, adaptive (measured while it runs) where the model cannot tell them apart; a pair measured before is"
echo "   planned from its measurement"
PLAN="${XOVER_RESULTS:-results}/demo-plan.json"  # in the results folder, where every command writes
mkdir -p "$(dirname "$PLAN")"
$XOVER plan "${RECIPES[@]}" "${WHERE[@]}" "${LINK[@]}" --out "$PLAN"
PLANNED_JSON="${XOVER_RESULTS:-results}/demo-planned.json"
ALL_JSON="${XOVER_RESULTS:-results}/demo-all.json"
SEQUENTIAL_JSON="${XOVER_RESULTS:-results}/demo-sequential.json"
echo "== run: the plan as planned, each group in the way of sharing picked for it (each job about $SECONDS_EACH s alone)"
$XOVER run "$PLAN" --seconds "$SECONDS_EACH" "${LINK[@]}" || true
$XOVER report latest --format json --out "$PLANNED_JSON"
echo "== run: the plan's jobs one after another, each alone, as scheduled: what the planned run is set beside"
$XOVER run "$PLAN" --mode sequential --seconds "$SECONDS_EACH" "${LINK[@]}" || true
$XOVER report latest --format json --out "$SEQUENTIAL_JSON"
echo "== run: the plan in every mode and turn policy (its jobs one after another first), to set each pick beside"
echo "   what each way measures"
$XOVER run "$PLAN" --mode all --policy all --seconds "$SECONDS_EACH" "${LINK[@]}" || true
$XOVER report latest --format json --out "$ALL_JSON"
echo "== the plan's run against its jobs one after another, both measured; each pick beside the best measured way"
$PY bench/demo_summary.py "$PLANNED_JSON" "$ALL_JSON" --one-after-another "$SEQUENTIAL_JSON" || true
echo "== report: per group, the planned sharing and why, the best measured mode, adaptive's timeline of ways"
$XOVER report latest
$XOVER report latest --format html
