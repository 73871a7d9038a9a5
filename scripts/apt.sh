# Sourced by the set-up scripts: apt_install PACKAGE... installs Debian packages without letting them
# start their own daemons (xover starts its own sshd, munged, slurmctld, postgres where and how it needs
# them): a policy-rc.d that denies every start is in place for the install only, unless the machine
# already has one. The package lists are fetched only when apt does not know the packages yet.
apt_install() {
  local policy=/usr/sbin/policy-rc.d placed=0 rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && placed=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  {
    apt-cache show "$@" >/dev/null 2>&1 || apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null 2>&1
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >/dev/null 2>&1
  } || rc=$?
  [ "$placed" = 1 ] && rm -f "$policy"
  return "$rc"
}
