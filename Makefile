# The two commands of the README: `make demo` and `make test`. Both set up .venv/ first.
PYTHON ?= python3
BIN := .venv/bin
STAMP := .venv/.xover-setup

.PHONY: setup demo test bench chaos clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/install_horovod.sh scripts/setup_cluster.sh
	bash scripts/setup.sh $(PYTHON)
	touch $(STAMP)

demo: setup
	bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/crossover_pair.py

chaos: setup
	$(BIN)/python bench/chaos.py

clean:
	-bash scripts/slurm.sh down
	rm -rf .venv results/xover.db* results/runs .pytest_cache
