#!/usr/bin/env bash
# Debian's Prometheus server for the tests (idempotent): tests/fixtures_services.py starts its own
# `prometheus` on a free loopback port with a scrape config and a storage folder of the test's, and stops it
# afterwards. Only the binary is wanted: the package's own service must not start (apt_install sees to that)
# nor be enabled for the next boot. Needs root and apt-get where it is missing; exit 0 when present, 1 otherwise.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
  echo "prometheus: $(prometheus --version 2>&1 | head -1)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "prometheus: missing; install Debian's prometheus package as root (apt-get install prometheus)" >&2
  exit 1
fi
# shellcheck source=scripts/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_install prometheus || { echo "prometheus: apt-get install prometheus failed" >&2; exit 1; }
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
echo "prometheus: installed $(prometheus --version 2>&1 | head -1) (the system's service left off: the tests start their own)"
