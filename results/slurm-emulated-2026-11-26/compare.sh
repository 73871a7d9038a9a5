#!/bin/bash
# issue 39: one group across both emulated hosts, through Slurm and with -H, every mode
set -eu
cd /work/main
X=".venv/bin/python -m xover"
export XOVER_DB=/tmp/cmp39/xover.db XOVER_RESULTS=/tmp/cmp39/results SLURM_CONF=/tmp/xover-slurm-emulated/slurm.conf
rm -rf /tmp/cmp39/xover.db* /tmp/cmp39/results
$X cluster up --hosts 2 --devices-per-host 1 --bandwidth 1gbit >/dev/null
trap 'bash scripts/slurm.sh down --emulated; '"$X"' cluster down >/dev/null' EXIT
bash scripts/slurm.sh up --emulated
printf 'name,devices,compute_ms,comm_ms,memory_gb\nmlp-digits,2,2,8,0.1\nresnet-digits,2,30,5,0.1\n' > /tmp/cmp39/trace.csv
$X plan --profiles /tmp/cmp39/trace.csv -H xo-h1:1,xo-h2:1 --max-group 2 --out /tmp/cmp39/plan.json --json > /tmp/cmp39/plan.out
date
ip netns exec xo-head $X run /tmp/cmp39/plan.json --launcher slurm --mode all --iterations 40 --json > /tmp/cmp39/slurm.json 2> /tmp/cmp39/slurm.err
date
$X run --group mlp-digits resnet-digits -H xo-h1:1,xo-h2:1 --mode all --iterations 40 --json > /tmp/cmp39/h.json 2> /tmp/cmp39/h.err
date
.venv/bin/python - <<'PY'
import json, sqlite3
def load(p): return json.load(open(p))
s, h = load('/tmp/cmp39/slurm.json'), load('/tmp/cmp39/h.json')
db = sqlite3.connect('/tmp/cmp39/xover.db')
def losses(exp):
    out = {}
    for name, mode, loss in db.execute("SELECT r.name, r.mode, m.loss FROM iteration_metrics m JOIN runs r ON r.id=m.run_id WHERE r.experiment_id=? ORDER BY r.id, m.step", (exp,)):
        out.setdefault((name, mode), []).append(loss)
    return out
ls, lh = losses(s['experiment']), losses(h['experiment'])
print('| job | mode | hosts (Slurm) | samples/s Slurm | samples/s -H | iter ms Slurm | iter ms -H | losses equal |')
print('|---|---|---|---|---|---|---|---|')
hj = {(j['name'], j['mode']): j for j in h['jobs']}
for j in s['jobs']:
    k = (j['name'], j['mode']); o = hj[k]
    print(f"| {k[0]} | {k[1]} | {j['hosts']} | {j['samples_per_s']:.0f} | {o['samples_per_s']:.0f} | {j['iteration_ms']:.1f} | {o['iteration_ms']:.1f} | {ls.get(k) == lh.get(k)} |")
for name, r in (('Slurm', s), ('-H', h)):
    for g in r['groups']:
        print(name, 'group', {k: g.get(k) for k in ('jobs', 'crossover_vs_sequential', 'crossover_vs_concurrent', 'measured_gain')})
print('slurm jobs', s.get('slurm_jobs'))
PY
