#!/usr/bin/env bash
# xover's GPU check: one prepared command for a machine with one NVIDIA GPU, root, and no network.
#
#   bash scripts/gpu_check.sh [--cpu] [--phases LIST] [--budget SECONDS] [--rate RATE] [--policy P] [--out DIR] [--work DIR]
#
# Beforehand, on a machine with the package registries: `make gpu-bundle` (wheels of SQLAlchemy, Alembic
# and Mako for Python 3.12, Debian's iproute2; into .gpu-bundle/, which travels with the checkout). The
# check installs them under its work folder only where they are missing. Phases, in order; each is skipped
# when the budget left is too short for it, and the summary is always written:
#   probe        environment, doctor, turn handoff with the CUDA synchronisation, time-slicing, determinism
#   parity       two np=1 jobs on the GPU (its first device, NCCL world of one), every mode, exact losses
#   pair-gloo    compute-heavy gpu-resnet + communication-heavy gpu-mlp, np=2 each, two devices per GPU,
#                Gloo on CUDA tensors over the shaped link: sequential, concurrent (the GPU's time-slicing),
#                crossover under both policies; fluid bound and prediction
#   pair-nccl    the same with NCCL (each rank its own NCCL host, joined over the shaped link)
#   paper        ResNet-50 + VGG-16 (the paper's pair), np=2 each, as pair-gloo
#   paper-mps    the paper's pair again under CUDA MPS (kernels of processes side by side), where it exists
#   scripts      a user's unmodified DDP script (a job file, bench/gpu/recipes/gpu-ddp-script.toml) next to
#                gpu-mlp: profiled through the shims, planned, run from the plan (every mode), exact losses
#   scripts-sync the same pair with XOVER_CHECKPOINT_SYNC=1 (yields seen at layer boundaries; not a default phase)
#   paper-bert   ResNet-50 + BERT-base;   paper-twins  two copies of ResNet-50
# The study of GPU-bound jobs (bench/gpu/study.sh runs them; not default phases), each at the link rate its
# profile says makes the all-reduce keep the link busy as long as the job computes (bench/gpu/balanced_rate.py):
#   bound        two GPU-bound ResNet-50s (bf16, channels-last), Gloo: profiled, planned (the plan picks the
#                sharing), run from the plan in every mode time-sliced, then concurrent, crossover and adaptive
#                under MPS; then as planned; then the two comparisons again where the budget allows
#   bound-nccl   the same pair with NCCL under MPS (CTAs bounded: NCCL_MAX_NCHANNELS, NCCL_MAX_CTAS), concurrent
#                and crossover, time-sliced and under MPS
#   bound-vgg    GPU-bound ResNet-50 + VGG-16, as bound (once);   bound-bert  GPU-bound ResNet-50 + BERT-base
# The default phases are the check (probe to scripts, about 8 minutes); the paper's pairs are the GPU
# benchmark: --phases paper,paper-mps,paper-bert,paper-twins --budget 420.
# --policy work-conserving|round-robin: the pairs' crossover under that policy alone (default: both).
# A pair profiled earlier in the same call is not profiled again (paper-mps reuses paper's profiles).
# --cpu: a dry run of every phase on the CPU with the small built-in recipes (what the test suite runs).
# Writes OUT/summary.md (one table), OUT/probe.json and OUT/data.tgz (the store, the reports and every log).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
CPU=0
PHASES_GIVEN=0
PHASES="probe parity pair-gloo pair-nccl scripts"  # the check; --phases paper,paper-mps,paper-bert,paper-twins: the benchmark
BUDGET=""
RATE=10gbit
POLICY=all
OUTDIR=""
WORK=""
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) CPU=1 ;;
    --phases) PHASES=${2//,/ }; PHASES_GIVEN=1; shift ;;
    --budget) BUDGET=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --policy) POLICY=$2; shift ;;
    --out) OUTDIR=$2; shift ;;
    --work) WORK=$2; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $POLICY in all|work-conserving|round-robin) ;;
  *) echo "gpu_check.sh: --policy must be all, work-conserving or round-robin, got '$POLICY'" >&2; exit 2 ;;
esac
OUTDIR=${OUTDIR:-$ROOT/results/gpu-check}
WORK=${WORK:-$OUTDIR/work}
mkdir -p "$OUTDIR" "$WORK"
T0=$SECONDS
left() { echo $((BUDGET - (SECONDS - T0))); }
say() { echo "[gpu-check $((SECONDS - T0))s] $*"; }
if [ -x "$ROOT/.venv/bin/python" ] && [ $CPU = 1 ]; then PY=${PYTHON:-$ROOT/.venv/bin/python}; else PY=${PYTHON:-python3}; fi
export PYTHONUNBUFFERED=1 XOVER_RESULTS=$WORK/results XOVER_DB=$WORK/xover.db XOVER_LEASE_DIR=$WORK/leases
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
export XOVER_DETERMINISTIC=1  # exact loss parity on the GPU (bench/gpu/probe.py determinism checks each model)
# the study measures adaptive's probing: a pair's second round would otherwise settle on the first's figures;
# its jobs run seconds, not hours, so a round of probes may take 60% of the time left, not 20% (at 8 s and 20%
# an H200 run never probed: 2026-12-04)
export XOVER_ADAPTIVE=${XOVER_ADAPTIVE:-measured=probe,share=0.6}

if [ $CPU = 1 ]; then
  BUDGET=${BUDGET:-420}
  export XOVER_CPU_ONLY=1
  R=resnet-synthetic; M=mlp-synthetic; S=tests/e2e/scripts/ddp-accumulate.toml; R50=resnet-synthetic; VGG=vgg-synthetic; BERT=transformer-tokens
  PAIR_SECONDS=1.5; PAPER_SECONDS=1.5; PROFILE=(--iterations 4 --warmup 1); PARITY_ITERATIONS=4
  B50=resnet-digits; BVGG=vgg-synthetic; BBERT=transformer-tokens; STUDY_SECONDS=1.5; STUDY_ROUNDS=1
  [ "$PHASES_GIVEN" = 1 ] || PHASES="probe parity pair-gloo pair-nccl scripts paper paper-bert paper-twins"
  [ "$RATE" = 10gbit ] && RATE=1gbit
else
  BUDGET=${BUDGET:-480}
  R=bench/gpu/recipes/gpu-resnet.toml; M=bench/gpu/recipes/gpu-mlp.toml; S=bench/gpu/recipes/gpu-ddp-script.toml
  R50=resnet50-synthetic; VGG=vgg16-synthetic; BERT=bert-base-tokens
  # A run with NCCL took 11-15 s to start on an H200: a job that runs 3 s may end before its partner
  # starts (docs/measurements.md, 2026-11-26), so every job gets at least 10 s.
  # Over Gloo on a shaped link an H200 job's first 7-8 steps ramp up (the all-reduce 340 -> 115 ms, the compute
  # 40 -> 76 ms; docs/measurements.md, 2026-12-04): a profile warms up past them.
  PAIR_SECONDS=10; PAPER_SECONDS=12; PROFILE=(--iterations 16 --warmup 10); PARITY_ITERATIONS=200
  B50=resnet50-bf16; BVGG=vgg16-bf16; BBERT=bert-base-bf16; STUDY_SECONDS=12; STUDY_ROUNDS=2
fi
# NCCL's CTAs bounded when jobs share a GPU: each communicator takes a few SMs, not all it would like
NCCL_BOUND=(NCCL_MAX_NCHANNELS=2 NCCL_MAX_CTAS=2)
# every rank of a job may share one GPU: each GPU counts as two devices (devices.py)
SHARED=(XOVER_DEVICES_PER_GPU=2 GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN)
DONE=""
STUDY_RATE=()
STUDY_PLAN=()
PROFILED=" "  # "backend:recipe+recipe" of the pairs profiled in this call
RUN_EXTRA=()

# ---- set-up: what the image lacks, from .gpu-bundle/ (no network there)
if ! "$PY" -c "import sqlalchemy, alembic, mako, pydantic" 2>/dev/null; then
  if ls .gpu-bundle/wheels/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" .gpu-bundle/wheels/*.whl \
      && export PYTHONPATH=$PYTHONPATH:$WORK/site && say "installed $(ls .gpu-bundle/wheels | tr '\n' ' ')"
  else
    say "SQLAlchemy/Alembic/Mako missing and no .gpu-bundle/wheels: run 'make gpu-bundle' where the registries are"
  fi
fi
need=""
for tool in ip tc sysctl unshare nsenter; do command -v "$tool" >/dev/null || need="$need $tool"; done
if [ -n "$need" ] && ls .gpu-bundle/debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$WORK/deb" "$WORK/bin"
  for deb in .gpu-bundle/debs/*.deb; do dpkg-deb -x "$deb" "$WORK/deb" 2>/dev/null || dpkg -x "$deb" "$WORK/deb"; done
  for tool in $need; do
    for candidate in "$WORK"/deb/{bin,sbin,usr/bin,usr/sbin}/$tool; do [ -x "$candidate" ] && break; done
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' \
      "$WORK/deb/usr/lib/x86_64-linux-gnu:$WORK/deb/lib/x86_64-linux-gnu" "$candidate" >"$WORK/bin/$tool"
    chmod +x "$WORK/bin/$tool"
  done
  export PATH=$PATH:$WORK/bin
  say "carried Debian tools for:$need"
fi
"$PY" -c 'import sys, torch, sqlalchemy; print("python", sys.version.split()[0], "torch", torch.__version__,
  "cuda", torch.cuda.is_available(), "sqlalchemy", sqlalchemy.__version__)' || { say "xover cannot import here"; exit 1; }
SAMPLER=""
if [ $CPU = 0 ]; then
  "$PY" bench/gpu/nvml_sampler.py "$WORK/nvml.csv" 0.2 & SAMPLER=$!
fi
BW=()
if "$PY" -c "
from xover.emulation.network import ShapedNetwork
with ShapedNetwork('$RATE'):
    pass" 2>"$WORK/link.err"; then
  BW=(--bandwidth "$RATE"); say "link emulation works: $RATE"
else
  say "link emulation unavailable ($(tail -n 1 "$WORK/link.err")): the jobs use the unshaped loopback"
fi
LINK=${BW[1]:-host}

# xo LIMIT NAME [VAR=VALUE ...] -- XOVER ARGS: one xover command under a limit, its output kept as NAME.*
xo() {
  local limit=$1 name=$2; shift 2
  local vars=(); while [ "$1" != "--" ]; do vars+=("$1"); shift; done; shift
  env "${vars[@]}" timeout -k 10 -s INT "$limit" "$PY" -m xover "$@" >"$WORK/$name.json" 2>"$WORK/$name.err"
  local code=$?
  say "  xover $1 ($name): exit $code"; [ $code = 0 ] || tail -n 4 "$WORK/$name.err"
  return $code
}

# report NAME: the experiment of NAME.run.json (latest when the run printed none) as NAME.report.json
report() {
  local id
  id=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['experiment'])" "$WORK/$1.run.json" 2>/dev/null \
       || echo latest)
  "$PY" -m xover report "$id" --format json >"$WORK/$1.report.json" 2>>"$WORK/$1.run.err"
  [[ " $DONE " == *" $1 "* ]] || DONE="$DONE $1"
}

# pair NAME NEED SECONDS BACKEND RECIPE RECIPE [VAR=VALUE ...]: profile both, then the comparison of a group
pair() {
  local name=$1 need=$2 seconds=$3 backend=$4 a=$5 b=$6; shift 6
  if [ "$(left)" -lt "$need" ]; then say "phase $name skipped: $(left)s left, needs ${need}s"; return; fi
  say "phase $name: $a + $b, $backend, link $LINK"
  local vars=("${SHARED[@]}" XOVER_TORCH_BACKEND=$backend "$@")
  local length=(--seconds "$seconds") modes=(--mode all --policy "$POLICY") key="$backend:$a+$b"
  if [ $CPU = 1 ] && [ "$name" != pair-gloo ]; then
    # the dry run profiles and compares once (pair-gloo); the other pairs run crossover alone, to stay
    # within minutes (a run costs 10-15 s here, most of it starting processes)
    length=(--iterations "${PROFILE[1]}"); modes=(--mode crossover --policy work-conserving)
  elif [[ $PROFILED == *" $key "* ]]; then
    say "  $a + $b ($backend) profiled earlier in this call"
  elif xo $(($(left) - 10)) "$name.profile" "${vars[@]}" -- profile "$a" "$b" --engine torch "${BW[@]}" \
       "${PROFILE[@]}" --no-corun --no-stretch --force --json; then
    PROFILED="$PROFILED$key "
  else
    length=(--iterations "${PROFILE[1]}")  # without profiles, a fixed length
  fi
  xo $(($(left) - 10)) "$name.run" "${vars[@]}" -- run --group "$a" "$b" --engine torch "${BW[@]}" "${length[@]}" \
    "${modes[@]}" "${RUN_EXTRA[@]}" --timeout $(($(left) - 20)) --json
  report "$name"
}

# twin RECIPE FILE: a copy of RECIPE under another name (a plan needs distinct job names)
twin() {
  "$PY" - "$1" "$2" <<'PYTWIN'
import sys, tomllib
from xover.recipes import resolve_recipe_path as find_recipe
source = find_recipe(sys.argv[1])
text = open(source).read()
name = tomllib.loads(text)["name"]
open(sys.argv[2], "w").write(text.replace(f'name = "{name}"', f'name = "{name}-twin"', 1))
PYTWIN
}

# study NAME NEED BACKEND RECIPE RECIPE: profile both (then again at the balanced rate, with each job's co-run
# stretch and, on a GPU, how busy it keeps the GPU while computing), plan, run from the
# plan in every mode and under MPS, then as planned, then again up to STUDY_ROUNDS rounds. The pair of the study's later phases
# reuses STUDY_RATE and STUDY_PLAN.
study() {
  local name=$1 need=$2 backend=$3 a=$4 b=$5; shift 5
  if [ "$(left)" -lt "$need" ]; then say "phase $name skipped: $(left)s left, needs ${need}s"; return; fi
  if [ "$a" = "$b" ]; then b="$WORK/$name-twin.toml"; twin "$a" "$b" || return; fi
  local vars=("${SHARED[@]}" XOVER_TORCH_BACKEND=$backend "$@") rate
  say "phase $name: $a + $b, $backend"
  xo $(($(left) - 10)) "$name.profile0" "${vars[@]}" -- profile "$a" "$b" --engine torch "${BW[@]}" \
    "${PROFILE[@]}" --no-corun --no-stretch --force --json
  if [ ${#BW[@]} -gt 0 ] && rate=$("$PY" bench/gpu/balanced_rate.py "$WORK/$name.profile0.json" 2>>"$WORK/$name.rate.err"); then
    say "  balanced link rate $rate (all-reduce as long as compute)"
    xo $(($(left) - 10)) "$name.profile" "${vars[@]}" -- profile "$a" "$b" --engine torch --bandwidth "$rate" \
      "${PROFILE[@]}" --no-corun --force --json || return
    STUDY_RATE=(--bandwidth "$rate")
  else
    say "  no balanced rate ($(tail -n 1 "$WORK/$name.rate.err" 2>/dev/null)): at ${BW[1]:-the unshaped loopback}"
    STUDY_RATE=("${BW[@]}")
  fi
  STUDY_PLAN=("$WORK/$name-plan.json")
  xo 60 "$name.plan" "${vars[@]}" -- plan "$a" "$b" --engine torch --devices 2 "${STUDY_RATE[@]}" \
    --out "$WORK/$name-plan.json" --json || return
  if "$PY" -c "import json, sys
try:
    sys.exit(0 if any(len(g['jobs']) > 1 for g in json.load(open(sys.argv[1]))['groups']) else 1)
except (OSError, ValueError, KeyError, TypeError):
    sys.exit(1)" "$WORK/$name-plan.json"; then
    say "  the plan groups them; its pick: $("$PY" -c "import json, sys; g = json.load(open(sys.argv[1]))['groups'][0]
print(g.get('sharing'), g.get('predicted_by_sharing'))" "$WORK/$name-plan.json")"
    local group=("$WORK/$name-plan.json")
  else
    say "  the plan keeps them apart: comparing them as one group anyway"; local group=(--group "$a" "$b" --engine torch)
  fi
  # round 1 in every way, then the plan's pick as planned, then further rounds while the budget lasts; a run
  # that would not end inside the budget is not started (on an H200 a round of 8-s jobs took 128 s
  # time-sliced and 85 s under MPS, docs/measurements.md, 2026-12-04: of 12-s jobs about 150 and 97 s; the
  # planned run, one way, not yet timed: 55 s allowed)
  local round
  for round in $(seq 1 "$STUDY_ROUNDS"); do
    if [ "$round" = 2 ] && [ "${group[0]}" != --group ]; then study_planned "$name" "${vars[@]}"; fi
    room $((CPU ? 20 : 160)) "$name-all$round" || break
    xo $(($(left) - 10)) "$name-all$round.run" "${vars[@]}" -- run "${group[@]}" "${STUDY_RATE[@]}" \
      --seconds "$STUDY_SECONDS" --mode all --policy work-conserving --timeout $(($(left) - 20)) --json
    report "$name-all$round"
    if [ $CPU = 0 ]; then
      room 105 "$name-mps$round" || break
      xo $(($(left) - 10)) "$name-mps$round.run" "${vars[@]}" -- run "${group[@]}" "${STUDY_RATE[@]}" --mps \
        --seconds "$STUDY_SECONDS" --mode concurrent,crossover,adaptive --policy work-conserving --timeout $(($(left) - 20)) --json
      report "$name-mps$round"
    fi
  done
  if [ "$STUDY_ROUNDS" -lt 2 ] && [ "${group[0]}" != --group ]; then study_planned "$name" "${vars[@]}"; fi
}

# room NEED NAME: whether NEED seconds of the budget are left for the run NAME (said when not)
room() {
  [ "$(left)" -ge "$1" ] && return 0
  say "  $2 not started: $(left)s left, needs ${1}s"; return 1
}

# study_planned NAME VAR=VALUE...: the study's plan run as planned (each group in the way the plan picked)
study_planned() {
  local name=$1; shift
  room $((CPU ? 15 : 55)) "$name-planned" || return 0
  xo $(($(left) - 10)) "$name-planned.run" "$@" -- run "${STUDY_PLAN[@]}" "${STUDY_RATE[@]}" \
    --seconds "$STUDY_SECONDS" --timeout $(($(left) - 20)) --json
  report "$name-planned"
}

[ $CPU = 1 ] && XOVER_TORCH_BACKEND_NCCL=gloo || XOVER_TORCH_BACKEND_NCCL=nccl
for phase in $PHASES; do
  case $phase in
    probe)
      say "phase probe"
      COLUMNS=150 timeout 60 "$PY" -m xover doctor >"$WORK/doctor.txt" 2>&1; say "  xover doctor: exit $? (1 where Horovod is missing, as on the lent GPU machines)"; cat "$WORK/doctor.txt"
      if [ $CPU = 1 ]; then probes=(env handoff determinism --cpu --rounds 80); else probes=(env handoff slicing determinism); fi
      timeout $((CPU ? 90 : 120)) "$PY" bench/gpu/probe.py "${probes[@]}" --json "$WORK/probe.json" ;;
    parity)
      if [ "$(left)" -lt 40 ]; then say "phase parity skipped: $(left)s left"; continue; fi
      say "phase parity: $R + $M, np=1 each on the first device"
      xo $(($(left) - 10)) parity.run -- run --group "$R" "$M" --np 1 --engine torch --iterations "$PARITY_ITERATIONS" \
        --mode all --policy work-conserving --timeout $(($(left) - 20)) --json
      report parity ;;
    pair-gloo) pair pair-gloo 80 "$PAIR_SECONDS" gloo "$R" "$M" ;;
    pair-nccl) pair pair-nccl 80 "$PAIR_SECONDS" "$XOVER_TORCH_BACKEND_NCCL" "$R" "$M" ;;
    scripts)  # the user's own script: job file -> profile (through the shims) -> plan -> run from the plan
      if [ "$(left)" -lt 100 ]; then say "phase scripts skipped: $(left)s left, needs 100s"; continue; fi
      say "phase scripts: $S + $M, gloo, link $LINK"
      xo $(($(left) - 10)) scripts.profile "${SHARED[@]}" XOVER_TORCH_BACKEND=gloo -- profile "$S" "$M" --engine torch \
        "${BW[@]}" "${PROFILE[@]}" --no-corun --no-stretch --force --json \
      && xo 60 scripts.plan "${SHARED[@]}" XOVER_TORCH_BACKEND=gloo -- plan "$S" "$M" --engine torch --devices 2 "${BW[@]}" \
        --out "$WORK/scripts-plan.json" --json \
      || { report scripts; continue; }
      plan=("$WORK/scripts-plan.json")
      if ! "$PY" -c "import json, sys
try:
    groups = json.load(open(sys.argv[1]))['groups']
except (OSError, ValueError, KeyError, TypeError):
    sys.exit(0)  # no plan to read: the run from it says why
sys.exit(len(groups) > 1)" "$WORK/scripts-plan.json"; then
        # the plan keeps them apart (its predicted gains are in scripts.plan.json): compare them as a group anyway
        say "  the plan keeps $S and $M apart: running them as one group"; plan=(--group "$S" "$M" --engine torch)
      fi
      xo $(($(left) - 10)) scripts.run "${SHARED[@]}" XOVER_TORCH_BACKEND=gloo -- run "${plan[@]}" \
        "${BW[@]}" --seconds "$PAIR_SECONDS" --mode all --policy work-conserving --timeout $(($(left) - 20)) --json
      report scripts ;;
    scripts-sync)  # the scripts phase's pair in crossover again, each GPU job waiting for its kernels at
      # every layer boundary of its turn (XOVER_CHECKPOINT_SYNC=1), so that a request to yield is seen there
      if [ "$(left)" -lt 60 ]; then say "phase scripts-sync skipped: $(left)s left, needs 60s"; continue; fi
      say "phase scripts-sync: $S + $M, gloo, link $LINK, XOVER_CHECKPOINT_SYNC=1"
      xo $(($(left) - 10)) scripts-sync.run "${SHARED[@]}" XOVER_TORCH_BACKEND=gloo XOVER_CHECKPOINT_SYNC=1 -- run \
        --group "$S" "$M" --engine torch "${BW[@]}" --seconds "$PAIR_SECONDS" --mode all --policy work-conserving \
        --timeout $(($(left) - 20)) --json
      report scripts-sync ;;
    paper) pair paper 100 "$PAPER_SECONDS" gloo "$R50" "$VGG" ;;
    paper-mps)  # xover starts and stops an MPS daemon of the run's own (xover run --mps)
      if [ $CPU = 1 ]; then say "phase paper-mps skipped: no MPS on a CPU"; continue; fi
      RUN_EXTRA=(--mps); pair paper-mps 100 "$PAPER_SECONDS" gloo "$R50" "$VGG"; RUN_EXTRA=() ;;
    paper-bert) pair paper-bert 100 "$PAPER_SECONDS" gloo "$R50" "$BERT" ;;
    paper-twins) pair paper-twins 100 "$PAPER_SECONDS" gloo "$R50" "$R50" ;;
    bound) study bound 300 gloo "$B50" "$B50" ;;
    bound-nccl)  # the bound pair's plan and rate, over NCCL with its CTAs bounded: time-sliced, then under MPS
      if [ "$(left)" -lt 90 ]; then say "phase bound-nccl skipped: $(left)s left, needs 90s"; continue; fi
      if [ ${#STUDY_PLAN[@]} = 0 ]; then  # no bound phase in this call: the pair as a group, at --rate
        twin "$B50" "$WORK/bound-nccl-twin.toml" || continue
        STUDY_PLAN=(--group "$B50" "$WORK/bound-nccl-twin.toml" --engine torch); STUDY_RATE=("${BW[@]}")
      fi
      say "phase bound-nccl: the bound pair, $XOVER_TORCH_BACKEND_NCCL, ${NCCL_BOUND[*]}, ${STUDY_RATE[*]:-unshaped}"
      for extra in "" --mps; do
        [ -n "$extra" ] && [ $CPU = 1 ] && continue
        xo $(($(left) - 10)) "bound-nccl${extra:+-mps}.run" "${SHARED[@]}" XOVER_TORCH_BACKEND=$XOVER_TORCH_BACKEND_NCCL \
          "${NCCL_BOUND[@]}" -- run "${STUDY_PLAN[@]}" "${STUDY_RATE[@]}" $extra --seconds "$STUDY_SECONDS" \
          --mode concurrent,crossover,adaptive --policy work-conserving --timeout $(($(left) - 20)) --json
        report "bound-nccl${extra:+-mps}"
      done ;;
    bound-vgg) STUDY_ROUNDS=1 study bound-vgg 240 gloo "$B50" "$BVGG" ;;
    bound-bert) STUDY_ROUNDS=1 study bound-bert 240 gloo "$B50" "$BBERT" ;;
    *) say "unknown phase $phase (see --help)" ;;
  esac
done

[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
cp "$WORK/probe.json" "$OUTDIR/" 2>/dev/null
"$PY" bench/gpu/summarize.py "$WORK" $DONE | tee "$OUTDIR/summary.md"
tar -czf "$OUTDIR/data.tgz" -C "$WORK" --exclude='*.sock' --exclude=site --exclude=deb --exclude=bin . 2>/dev/null
say "done: $OUTDIR/summary.md, $OUTDIR/data.tgz"
