#!/usr/bin/env bash
# Set up .venv/ for xover (idempotent): torch (kept if present), xover and its test tools, the frameworks
# users' scripts train with (Lightning, Accelerate, transformers), MLflow's client, Horovod, and Debian's Prometheus
# server for the tests.
set -euo pipefail
PY=${1:-python3}
VENV=.venv
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

# torch first, so that no other package pulls a multi-GB CUDA build as a side effect.
if "$VPY" -c "import torch" 2>/dev/null; then
  echo "torch: keeping $("$VPY" -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$VPY" -m pip install -q "torch>=2.4"
elif "$VPY" -m pip download -q --no-deps --no-index "torch==2.13.0+cpu" -d "$(mktemp -d)" >/dev/null 2>&1; then
  # a local CPU wheel is on pip's find-links (its dependencies still come from the index)
  "$VPY" -m pip install -q "torch==2.13.0+cpu"
  echo "torch: 2.13.0+cpu from the local wheel"
else
  "$VPY" -m pip install -q "torch>=2.4" --index-url https://download.pytorch.org/whl/cpu
fi

# the frameworks users' scripts train with (Lightning, Accelerate, transformers: tests/e2e/test_framework_scripts.py)
# and MLflow's client (`xover report --format mlflow`: tests/integration/test_report_mlflow.py,
# tests/e2e/test_mlflow_of_a_run.py), with the torch installed above pinned: none of them may replace it
TORCH_PIN=$(mktemp)
"$VPY" -c 'import torch; print(f"torch=={torch.__version__}")' > "$TORCH_PIN"
"$VPY" -m pip install -q -e ".[test,frameworks,mlflow]" -c "$TORCH_PIN"
rm -f "$TORCH_PIN"
bash scripts/install_horovod.sh "$VPY"
# The emulated cluster's parts (openssh-server, iproute2): optional, `xover doctor` says when missing.
bash scripts/setup_cluster.sh || echo "emulated cluster unavailable (xover doctor says why)"
# Debian's prometheus for the tests' Prometheus server (tests/fixtures_services.py): optional like the cluster's parts.
bash scripts/setup_prometheus.sh || echo "prometheus unavailable: its tests skip here (and fail under CI=true)"
