# The two commands of the README: `make demo` and `make test`. Both set up .venv/ first.
PYTHON ?= python3
BIN := .venv/bin
STAMP := .venv/.xover-setup

.PHONY: setup demo check test bench chaos clean gpu-bundle gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/install_horovod.sh scripts/setup_cluster.sh scripts/setup_prometheus.sh
	bash scripts/setup.sh $(PYTHON)
	touch $(STAMP)

demo: setup
	bash scripts/demo.sh

# The inner loop (under two minutes): lint, format, types, the unit tests. Run it before every commit;
# `make test` (the whole suite, real launchers) before a merge.
check: setup
	$(BIN)/ruff check xover bench tests recipes
	$(BIN)/ruff format --check xover bench recipes
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n 2 tests/unit

# Three workers on this machine's two cores, a module's tests on one: with two, the cores were idle while
# a worker waited on process starts, rendezvous and Slurm's clocks (docs/measurements.md, *make test's
# time*: 25 min 57 s with two workers, 20 min 58 s with three, the cores 98% busy). What the whole machine
# has once (the emulated cluster, Slurm, PostgreSQL) is used under a lock, its modules one unit of work on
# one worker, and the heaviest units are handed out first (tests/conftest.py). TEST_WORKERS=N to change.
# The suite starts some 2,000 Python processes, each importing xover's modules: compiled once here, because
# an environment with PYTHONDONTWRITEBYTECODE=1 (this machine's) has every process compile them again.
TEST_WORKERS ?= 3
test: setup
	$(BIN)/python -m compileall -q xover tests bench recipes
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

bench: setup
	$(BIN)/python bench/crossover_pair.py

chaos: setup
	$(BIN)/python bench/chaos.py

# The GPU check's offline set-up (wheels for Python 3.12, Debian's iproute2) into .gpu-bundle/; then on the GPU
# machine, with no network: `bash scripts/gpu_check.sh` (`make gpu-check`: its dry run on this CPU).
gpu-bundle:
	bash scripts/gpu_bundle.sh

gpu-check: setup
	bash scripts/gpu_check.sh --cpu

clean:
	-bash scripts/slurm.sh down
	rm -rf .venv results/xover.db* results/runs .pytest_cache
