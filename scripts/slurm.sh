#!/usr/bin/env bash
# A Slurm cluster on this machine, for xover's tests and for trying `--launcher slurm`: a single node (this
# machine), or with --emulated one node per host of the emulated cluster (`xover cluster up`).
#
#   scripts/slurm.sh install  install slurm-wlm + munge if missing (idempotent; `up` does it too)
#   scripts/slurm.sh up       install slurm-wlm + munge if missing, configure, start, wait for idle nodes
#   scripts/slurm.sh down     cancel jobs, stop every daemon `up` started, remove its directory
#   scripts/slurm.sh status   say whether it runs (exit 0) or not (exit 3)
#   scripts/slurm.sh env      the line to eval so that sbatch/squeue/... talk to it
#   ... --emulated            (after the command) the cluster on the emulated hosts instead
#
# With --emulated, slurmctld runs on the cluster's head (the namespace xo-head, 10.231.0.254: its login
# node) and one slurmd per emulated host inside that host's namespaces (its network, its hostname and the
# cluster's /etc/hosts: those of the host's sshd), pinned to the host's cores, as node xo-hK at the host's
# address; partition `emulated` holds them all. munged is shared as on a real cluster: one key, and one
# socket that every namespace reaches (a path, not a port). Slurm's clients reach the controller from the
# head, as from a login node: `ip netns exec xo-head srun -N 2 hostname`. Jobs are confined by their
# host's CPU affinity, which every step inherits from its slurmd (no cgroups: two slurmd on one machine
# would confine their jobs to the same cores). It has its own directory and daemons, so it can run
# beside the single-node cluster.
#
# Everything lives under $XOVER_SLURM_DIR (default /tmp/xover-slurm): configuration, munge key and
# socket, state, spool, logs, pid files. The system's /etc/slurm and /etc/munge are left alone: clients
# find this cluster through SLURM_CONF, and munge runs on a private socket with a private key. Ports
# are not Slurm's defaults, so a real slurmctld on this machine is not disturbed.
# Needs root (the daemons run jobs as the submitting user) and no systemd: the daemons are started
# directly. Where cgroup v1's freezer and cpuset hierarchies are mounted and writable (as in this
# project's machines) jobs are tracked and confined to their cores with cgroups, as on a real
# cluster; elsewhere (cgroup v2 without systemd, XOVER_SLURM_CGROUP=0) by /proc, without confinement.
set -euo pipefail

COMMAND=${1:-}
EMULATED=0
if [ "${2:-}" = --emulated ]; then
  EMULATED=1
elif [ -n "${2:-}" ]; then
  echo "usage: $0 install|up|down|status|env [--emulated]" >&2; exit 2
fi
if [ "$EMULATED" = 1 ]; then
  DIR=${XOVER_SLURM_DIR:-/tmp/xover-slurm-emulated}
else
  DIR=${XOVER_SLURM_DIR:-/tmp/xover-slurm}
fi
CTLD_PORT=${XOVER_SLURM_PORT:-6917}  # slurmd listens on the next port
NODE=$(hostname -s)
CLUSTER_STATE=/run/xover-cluster/cluster.json  # xover/emulation/cluster.py's STATE_FILE
HEAD_NS=xo-head
CONF=$DIR/slurm.conf
MUNGE_SOCKET=$DIR/run/munge.socket  # its folder must be reachable by every user
START_TIMEOUT_S=${XOVER_SLURM_START_TIMEOUT_S:-60}

say() { echo "slurm.sh: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=scripts/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (slurmd starts jobs as their user; munge and slurm run as root here)"
}

# (apt_install keeps the packages from starting their own daemons: a stray system munged or slurmctld
# would compete with ours)

install_packages() {
  local missing=0 tool
  for tool in slurmctld slurmd sbatch scontrol munged mungekey; do
    command -v "$tool" >/dev/null 2>&1 || missing=1
  done
  [ "$missing" = 0 ] && return 0
  need_root
  command -v apt-get >/dev/null 2>&1 || die "slurm-wlm and munge are missing and there is no apt-get to install them"
  say "installing slurmctld slurmd slurm-client munge (Debian's slurm-wlm)"
  apt_install slurmctld slurmd slurm-client munge || die "apt-get install slurmctld slurmd slurm-client munge failed"
}

# alive and not a zombie (a killed daemon stays one until init reaps it)
pid_alive() { [ -s "$1" ] && ps -o stat= -p "$(cat "$1")" 2>/dev/null | grep -qv '^Z'; }

daemons_alive() {
  pid_alive "$DIR/run/munged.pid" && pid_alive "$DIR/run/slurmctld.pid" || return 1
  local file found=0
  for file in "$DIR"/run/slurmd*.pid; do
    [ -e "$file" ] || continue
    pid_alive "$file" || return 1
    found=1
  done
  [ "$found" = 1 ]
}

# Slurm's clients; on the emulated cluster from its head, the one place that reaches the controller
client() {
  if [ "$EMULATED" = 1 ]; then
    SLURM_CONF=$CONF ip netns exec "$HEAD_NS" "$@"
  else
    SLURM_CONF=$CONF "$@"
  fi
}

# The emulated cluster's state, read once by `up --emulated` (in this shell, so that die ends the script):
# HEAD_ADDRESS, and HOSTS with a line per host: name address cores (comma-separated) sshd-pid
read_emulated_cluster() {
  [ -r "$CLUSTER_STATE" ] || die "no emulated cluster is up ($CLUSTER_STATE): run 'xover cluster up --hosts 2' first"
  local lines
  lines=$(python3 - "$CLUSTER_STATE" <<'PY'
import json, sys
state = json.load(open(sys.argv[1]))
if not state.get("ready"):
    sys.exit(1)
print(state["head"]["address"])
for host in state["hosts"]:
    print(host["name"], host["address"], ",".join(map(str, host["cores"])), host["sshd_pid"])
PY
) || die "the emulated cluster ($CLUSTER_STATE) is not ready: see 'xover cluster status'"
  HEAD_ADDRESS=$(echo "$lines" | head -1)
  HOSTS=$(echo "$lines" | tail -n +2)
}

# cgroup v1 as Slurm 22.05 uses it without systemd: freezer (tracking) and cpuset (cores) mounted and
# writable here. (Lost from this file on 2026-11-26 and missed for six days: `if` swallowed the
# "command not found", so every cluster since tracked by /proc without confinement.)
cgroup_v1_usable() {
  [ "${XOVER_SLURM_CGROUP:-1}" != 0 ] || return 1
  local controller probe
  for controller in freezer cpuset; do
    grep -q " /sys/fs/cgroup/$controller cgroup " /proc/mounts || return 1
    probe=/sys/fs/cgroup/$controller/xover-probe-$$
    { mkdir "$probe" && rmdir "$probe"; } 2>/dev/null || return 1
  done
}

node_state() { { client sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null || true; } | head -1; }

# the emulated nodes in one word: idle when every one is, else the first other state
nodes_state() {
  local states
  states=$({ client sinfo -h -N -p emulated -o '%T' 2>/dev/null || true; } | sort -u)
  if [ "$states" = idle ]; then echo idle; else echo "$states" | grep -v '^idle$' | head -1; fi
}

# what both clusters' slurm.conf say alike; $1: the spool folder's per-node part ("" or /%n)
common_settings() {
  cat <<EOF
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool$1
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
PlugStackConfig=$DIR/plugstack.conf
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# start a submitted job at once (the default holds batch jobs for up to 3 s)
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MailProg=/bin/true
# a request the partition can never satisfy is refused by sbatch, not left pending
EnforcePartLimits=ALL
MpiDefault=none
ReturnToService=2
# finished jobs stay visible to \`scontrol show job\` (there is no accounting database)
MinJobAge=3600
# a job's tasks run at the nice value of the sbatch that submitted it (the tests that wait for Slurm's
# clock run theirs niced, so that the other tests on these shared cores go first)
PropagatePrioProcess=1
EOF
}

write_config() {
  # the node as slurmd itself measures it (CPUs, sockets, cores, threads, memory)
  local hardware gres_line="" gres_types="" tracking
  if cgroup_v1_usable; then
    tracking="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup"
    printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainCores=yes\n' >"$DIR/cgroup.conf"
    # slurmd creates slurm_<node> in each hierarchy; `down` removes the ones that were not there before
    local controller
    for controller in freezer cpuset; do
      [ -e "/sys/fs/cgroup/$controller/slurm_$NODE" ] || echo "/sys/fs/cgroup/$controller/slurm_$NODE" >>"$DIR/cgroups"
    done
  else
    tracking="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none"
  fi
  hardware=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
  local gpus
  gpus=$(ls /dev/nvidia[0-9]* 2>/dev/null | sort -V || true)
  if [ -n "$gpus" ]; then
    # GPUs as a generic resource, so jobs get SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES
    local count first last
    count=$(echo "$gpus" | wc -l)
    first=$(echo "$gpus" | head -1 | sed 's#/dev/nvidia##')
    last=$(echo "$gpus" | tail -1 | sed 's#/dev/nvidia##')
    gres_types="GresTypes=gpu"
    gres_line="Gres=gpu:$count"
    echo "NodeName=$NODE Name=gpu File=/dev/nvidia[$first-$last]" >"$DIR/gres.conf"
  fi
  cat >"$CONF" <<EOF
# written by xover's scripts/slurm.sh; removed by \`scripts/slurm.sh down\`
ClusterName=xover
SlurmctldHost=$NODE(127.0.0.1)
$(common_settings "")
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmdLogFile=$DIR/log/slurmd.log
$tracking
$gres_types
NodeName=$NODE NodeAddr=127.0.0.1 $hardware $gres_line State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$DIR/plugstack.conf"
}

start_munge() {
  mkdir -p "$DIR/munge"
  chmod 700 "$DIR/munge"
  mungekey --create --keyfile="$DIR/munge/munge.key" --force >/dev/null 2>&1 ||
    die "mungekey could not create $DIR/munge/munge.key"
  chmod 600 "$DIR/munge/munge.key"
  # --force: munged refuses a socket under a folder not every user may enter (a /tmp of mode 0700, as on
  # some build machines); here every client of this private munged runs as root
  munged --force --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" 9<&- ||
    die "munged did not start; see $DIR/log/munged.log"
}

write_config_emulated() {
  local name address cores pid nodes=""
  while read -r name address cores pid; do
    nodes="${nodes}NodeName=$name NodeAddr=$address CPUs=$(echo "$cores" | tr ',' ' ' | wc -w) State=UNKNOWN
"
  done <<<"$HOSTS"
  cat >"$CONF" <<EOF
# written by xover's scripts/slurm.sh up --emulated; removed by \`scripts/slurm.sh down --emulated\`
ClusterName=xover-emulated
SlurmctldHost=$HEAD_NS($HEAD_ADDRESS)
$(common_settings /%n)
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
# a node is what this file says (its host's cores), not the whole machine its slurmd sees
SlurmdParameters=config_overrides
# a host whose slurmd died is DOWN, and its jobs NODE_FAIL, within a minute (the default waits 5)
SlurmdTimeout=30
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
${nodes}PartitionName=emulated Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$DIR/plugstack.conf"
}

start_emulated() {
  local name address cores pid
  # the controller checks that its hostname is SlurmctldHost's: the head's name, in a UTS namespace of its own
  ip netns exec "$HEAD_NS" unshare --uts -- sh -c "hostname $HEAD_NS && exec slurmctld -f $CONF" 9<&- ||
    die "slurmctld did not start on $HEAD_NS; see $DIR/log/slurmctld.log"
  while read -r name address cores pid; do
    mkdir -p "$DIR/spool/$name"
    # The host's sshd holds its namespaces: network, hostname, and the mounts that give the cluster's
    # /etc/hosts and ssh settings. Those mounts hide the machine's cgroups (a namespace's own /sys), which
    # slurmd looks for at start even when it tracks jobs without them: a cgroup v1 root with the named
    # systemd hierarchy it checks for, in a copy of those mounts of slurmd's own.
    nsenter --target "$pid" --net --uts --mount -- unshare --mount --propagation slave -- sh -c "
      mount -t tmpfs -o mode=755 xover-slurm /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
      mount -t cgroup -o none,name=systemd xover-slurm /sys/fs/cgroup/systemd &&
      exec taskset -c $cores slurmd -f $CONF -N $name" 9<&- ||
      die "slurmd did not start on $name; see $DIR/log/slurmd-$name.log"
  done <<<"$HOSTS"
}

up() {
  install_packages
  need_root
  if [ "$EMULATED" = 1 ]; then read_emulated_cluster; fi  # before anything is made
  if daemons_alive; then
    say "already running ($CONF)"
  else
    [ -d "$DIR" ] && down_quietly
    mkdir -p "$DIR"/{state,spool,run,log}
    chmod 755 "$DIR"
    if [ "$EMULATED" = 1 ]; then
      write_config_emulated
      start_munge
      start_emulated
    else
      write_config
      start_munge
      slurmctld -f "$CONF" 9<&- || die "slurmctld did not start; see $DIR/log/slurmctld.log"
      slurmd -f "$CONF" 9<&- || die "slurmd did not start; see $DIR/log/slurmd.log"
    fi
  fi
  local deadline=$((SECONDS + START_TIMEOUT_S)) state=""
  while [ $SECONDS -lt $deadline ]; do
    local file daemon
    for file in "$DIR"/run/*.pid; do
      # a daemon that wrote its pid file and then exited (a port taken, a bad configuration)
      daemon=$(basename "$file" .pid)
      if [ -s "$file" ] && ! pid_alive "$file"; then
        die "$daemon exited; its log ends with: $(tail -n 3 "$DIR/log/$daemon.log" 2>/dev/null | tr '\n' ' ')"
      fi
    done
    if [ "$EMULATED" = 1 ]; then state=$(nodes_state); else state=$(node_state); fi
    case "$state" in
      idle|mixed|allocated) break ;;
    esac
    sleep 0.5
  done
  case "$state" in
    idle|mixed|allocated) ;;
    *) die "nodes '${state:-unreachable}' after ${START_TIMEOUT_S}s; see $DIR/log/slurmctld.log and slurmd*.log" ;;
  esac
  if [ "$EMULATED" = 1 ]; then
    say "up: nodes $(client sinfo -h -p emulated -o %N) $state (partition emulated); export SLURM_CONF=$CONF and run Slurm's commands on the head: ip netns exec $HEAD_NS srun -N 2 hostname"
  else
    say "up: node $NODE $state (partition debug); export SLURM_CONF=$CONF"
  fi
}

# TERM to the daemons named by these pid files, together; KILL to any still there after 10 s
stop_pid_files() {
  local file pids="" pid i
  for file in "$@"; do
    [ -s "$file" ] && pids="$pids $(cat "$file")"
  done
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for i in $(seq 100); do
    local alive=""
    for pid in $pids; do ps -o stat= -p "$pid" 2>/dev/null | grep -qv '^Z' && alive="$alive $pid"; done
    pids=$alive
    [ -z "$pids" ] && return 0
    sleep 0.1
  done
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
}

down_quietly() {
  if pid_alive "$DIR/run/slurmctld.pid"; then
    # jobs first, so that no job step outlives its slurmd
    local jobs i
    jobs=$(client squeue -h -o %i 2>/dev/null || true)
    # shellcheck disable=SC2086  # one argument per job id
    [ -n "$jobs" ] && client scancel --quiet $jobs >/dev/null 2>&1 || true
    for i in $(seq 50); do
      [ -z "$(client squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  stop_pid_files "$DIR"/run/slurmd*.pid "$DIR/run/slurmctld.pid"
  stop_pid_files "$DIR/run/munged.pid"  # last: the others authenticate through it until they end
  if [ -f "$DIR/cgroups" ]; then
    local group
    while read -r group; do
      # leaves first; a cgroup that still holds a process stays (rmdir refuses), and says so
      [ -d "$group" ] && find "$group" -depth -type d -exec rmdir {} \; 2>/dev/null
      [ -d "$group" ] && say "could not remove $group (a process of a job is still in it)"
    done <"$DIR/cgroups"
  fi
  rm -rf "$DIR"
}

down() {
  [ -d "$DIR" ] || { say "down: nothing to stop"; return 0; }
  need_root
  down_quietly
  say "down: stopped and removed $DIR"
}

status() {
  if daemons_alive; then
    if [ "$EMULATED" = 1 ]; then
      say "running: nodes $(client sinfo -h -p emulated -o '%N %T'); export SLURM_CONF=$CONF (clients on the head: ip netns exec $HEAD_NS)"
    else
      say "running: node $NODE $(node_state || echo unknown); export SLURM_CONF=$CONF"
    fi
    return 0
  fi
  say "not running"
  return 3
}

# one `up` or `down` at a time (a second test session would otherwise race the first); the lock is
# on this script itself so that nothing is left behind, and the daemons must not inherit it (9<&-)
exec 9<"$0"
case "$COMMAND" in
  install) install_packages ;;
  up) flock 9; up ;;
  down) flock 9; down ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 install|up|down|status|env [--emulated]" >&2; exit 2 ;;
esac
