# Developer shortcuts. PYTHON must have this package installed (e.g. make bench PYTHON=/work/venv/bin/python).
PYTHON ?= python

.PHONY: bench bench-quick

# Side-by-side benchmarks against the public reference package (installed into .bench-cache/reference-venv)
# and recall on LoCoMo; writes docs/benchmarks.md and docs/img/*.png.
bench:
	$(PYTHON) benchmarks/run.py --full

# CI smoke run (< 2 minutes, asserts nothing about speed); report in .bench-cache/report-quick/.
bench-quick:
	$(PYTHON) benchmarks/run.py --quick
