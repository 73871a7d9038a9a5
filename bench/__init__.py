"""The benchmarks: scripts that run the real `xover` commands and call the product's own functions
(analysis, plans, report.data, run.commands), never copies of them. Run one as
`.venv/bin/python bench/NAME.py` or `.venv/bin/python -m bench.NAME`."""
