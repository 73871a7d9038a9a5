#!/usr/bin/env bash
# Fetch what `scripts/gpu_check.sh` needs on a GPU machine without network, into .gpu-bundle/ (ignored):
#   wheels/  SQLAlchemy, Alembic, Mako, pydantic and its needs for Python 3.12 (the GPU image has torch, typer, rich, scipy, ...)
#   debs/    Debian's iproute2 and util-linux/procps tools with their libraries, unpacked there only where
#            ip, tc, unshare, nsenter or sysctl are missing (the emulated link needs them)
# Idempotent: what is already there is kept. Needs PyPI and Debian's archive (this machine has both).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=.gpu-bundle
PY=${PYTHON:-python3}
mkdir -p "$BUNDLE/wheels" "$BUNDLE/debs"
WHEELS=(sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 pydantic==2.12.5 pydantic-core==2.41.5 annotated-types==0.7.0
        typing-inspection==0.4.2 typing-extensions==4.15.0)
for wheel in "${WHEELS[@]}"; do
  name=${wheel%%==*}; name=${name//-/_}  # a wheel's file name spells pydantic-core as pydantic_core
  if ! ls "$BUNDLE/wheels" | grep -qi "^${name}-${wheel##*==}-"; then
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform any -d "$BUNDLE/wheels" "$wheel"
  fi
done
DEBS=(iproute2 libbpf1 libelf1 libmnl0 libbsd0 libmd0 libcap2 libxtables12 zlib1g util-linux libselinux1 libpcre2-8-0
      procps libproc2-0)
missing=()
for deb in "${DEBS[@]}"; do ls "$BUNDLE/debs/${deb}_"*.deb >/dev/null 2>&1 || missing+=("$deb"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ -n "$(ls /var/lib/apt/lists/*Packages* 2>/dev/null)" ] || apt-get update -qq
  # a package this release does not carry (libproc2-0 is bookworm's procps library) is left out, not fatal
  for deb in "${missing[@]}"; do (cd "$BUNDLE/debs" && apt-get download -qq "$deb" 2>/dev/null) || echo "no $deb here"; done
fi
du -sh "$BUNDLE"
