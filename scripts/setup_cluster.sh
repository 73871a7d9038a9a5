#!/usr/bin/env bash
# What `xover cluster up` needs from the system (idempotent): sshd (openssh-server), the ssh client and
# ssh-keygen (openssh-client), ip and tc (iproute2), unshare (util-linux), sysctl (procps).
# Installed with apt-get when missing; needs root. Exit 0 when everything is present, 1 otherwise.
set -euo pipefail

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
{ command -v ssh && command -v ssh-keygen; } >/dev/null 2>&1 || missing+=(openssh-client)
{ command -v ip && command -v tc; } >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v sysctl >/dev/null 2>&1 || missing+=(procps)

if [ ${#missing[@]} -eq 0 ]; then
  echo "emulated cluster: sshd, ssh, ip, tc present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "emulated cluster: missing ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "emulated cluster: missing ${missing[*]} and no apt-get here; install them with this system's packager" >&2
  exit 1
fi

# The emulated hosts start their own sshd inside their namespaces; the package's own service would listen
# on every address of this machine, so it must not start (apt_install sees to that).
sshd_was_installed=0
[ -x /usr/sbin/sshd ] && sshd_was_installed=1
# shellcheck source=scripts/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_install "${missing[@]}" || { echo "emulated cluster: apt-get install ${missing[*]} failed" >&2; exit 1; }
echo "emulated cluster: installed ${missing[*]}"

# Under systemd, the package enables ssh.service for the next boot too; the daemon was installed for the
# emulated hosts only, so it stays off (a machine that had sshd before is left as it was).
if [ "$sshd_was_installed" = 0 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
  echo "emulated cluster: the system's ssh service was left disabled (xover starts its own sshd per emulated host)"
fi
