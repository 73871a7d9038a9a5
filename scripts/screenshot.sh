#!/usr/bin/env bash
# A screenshot of a web page in headless Chromium (Debian's `chromium`), for the docs' pictures:
#   bash scripts/screenshot.sh URL OUT.png [WIDTHxHEIGHT]     (default 1400x900)
# Single-page apps (MLflow's UI, Prometheus' graph) render in virtual time before the picture is taken
# (XOVER_SCREENSHOT_BUDGET_MS, default 20000). Not part of set-up: `apt-get install chromium` first.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 URL OUT.png [WIDTHxHEIGHT]" >&2
  exit 2
fi
url=$1
out=$2
size=${3:-1400x900}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "screenshot: no chromium here; install Debian's (apt-get install chromium)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: Chromium refuses to run as root with its sandbox; the page is one of this machine's servers
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions \
  --user-data-dir="$profile" --window-size="${size/x/,}" \
  --virtual-time-budget="${XOVER_SCREENSHOT_BUDGET_MS:-20000}" --screenshot="$(realpath -m "$out")" "$url" \
  >/dev/null 2>&1
[ -s "$out" ] || { echo "screenshot: chromium wrote no $out" >&2; exit 1; }
echo "wrote $out"
