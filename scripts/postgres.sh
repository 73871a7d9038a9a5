#!/usr/bin/env bash
# A throw-away PostgreSQL server for xover's tests, in a folder of its own.
#
#   scripts/postgres.sh install    install Debian's postgresql if missing (idempotent)
#   scripts/postgres.sh up DIR     initdb + start a server in DIR (created; must be reachable by the
#                                  `postgres` user when run as root: a folder under /tmp), create the
#                                  database `xover`, print its SQLAlchemy URL on stdout
#   scripts/postgres.sh down DIR   stop that server and remove DIR (idempotent)
#
# The server listens on a unix socket in DIR/socket only (no TCP port), trusts local connections,
# and runs without fsync: it is for tests, and everything in it is thrown away by `down`.
# initdb refuses to run as root, so as root the server runs as the `postgres` user (runuser).
set -euo pipefail

say() { echo "postgres.sh: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=scripts/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return; fi
  command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)"
}

# apt-get install without letting the package start the system's own cluster on port 5432
# (a policy-rc.d that denies starts, for the duration of the install only, unless one exists)

install() {
  [ -n "$(bindir)" ] && return 0
  [ "$(id -u)" = 0 ] || die "postgresql is not installed and installing it needs root (apt-get install postgresql)"
  command -v apt-get >/dev/null 2>&1 || die "postgresql is not installed and there is no apt-get to install it"
  say "installing Debian's postgresql"
  apt_install postgresql || die "apt-get install postgresql failed"
  [ -n "$(bindir)" ] || die "postgresql was installed but initdb is not under /usr/lib/postgresql/*/bin"
}

# run a server program as the user that owns the cluster
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

up() {
  local dir=$1
  install
  local bin
  bin=$(bindir)
  [ ! -e "$dir/data" ] || die "$dir/data exists already: run \`$0 down $dir\` first"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "there is no 'postgres' user to run the server as (it comes with postgresql)"
    chown postgres: "$dir"
    chmod 700 "$dir"
    runuser -u postgres -- test -w "$dir" ||
      die "the postgres user cannot reach $dir: use a folder whose parents it can enter (e.g. under /tmp)"
  fi
  as_owner mkdir -m 700 "$dir/data" "$dir/socket"
  as_owner "$bin/initdb" -D "$dir/data" -U xover --auth=trust --encoding=UTF8 --no-locale --no-sync \
    >"$dir/initdb.log" 2>&1 || die "initdb failed; see $dir/initdb.log"
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
    -o "-k $dir/socket -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null || die "the server did not start; see $dir/postgres.log"
  as_owner "$bin/createdb" -h "$dir/socket" -U xover xover || die "createdb xover failed; see $dir/postgres.log"
  echo "postgresql+psycopg://xover@/xover?host=$dir/socket"
}

down() {
  local dir=$1
  [ -d "$dir" ] || return 0
  local bin
  bin=$(bindir)
  if [ -f "$dir/data/postmaster.pid" ]; then
    local pid
    pid=$(head -1 "$dir/data/postmaster.pid")
    if [ -n "$bin" ]; then as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true; fi
    # pg_ctl gone or failed: the postmaster of this folder, by its pid file, and nothing else
    if kill -0 "$pid" 2>/dev/null; then
      kill -QUIT "$pid" 2>/dev/null || true
      local i
      for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  install) install ;;
  up) [ -n "${2:-}" ] || die "usage: $0 up DIR"; up "$2" ;;
  down) [ -n "${2:-}" ] || die "usage: $0 down DIR"; down "$2" ;;
  *) echo "usage: $0 install | up DIR | down DIR" >&2; exit 2 ;;
esac
