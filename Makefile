# Developer shortcuts. PYTHON must have this package installed with its [all,dev] extras
# (scripts/test makes .venv so; e.g. make bench PYTHON=.venv/bin/python).
PYTHON ?= python

.PHONY: test docs reliability-report bench bench-quick llm-eval bench-postgres

# The whole suite as CI runs it (installs and starts what it needs; see README).
test:
	bash scripts/test

# Refresh the generated config tables in docs/backends/*.md (tests fail while they differ).
docs:
	$(PYTHON) -m ovos_memory_plugins._cli.docs_tables --write

# Run the reliability suite (slow tests included; needs redis-server on PATH) and, only if every
# test passed, replace docs/reliability.md with its report. A plain test run writes the report to
# build/reports/ and never touches the tracked copy.
reliability-report:
	rm -rf build/reports/reliability
	PYTHON=$(PYTHON) bash scripts/with-servers env OVOS_MEMORY_REPORT_DIR=build/reports/reliability \
		$(PYTHON) -m pytest -p no:cacheprovider tests/reliability
	cp build/reports/reliability/reliability.md docs/reliability.md

# Side-by-side benchmarks against the public reference package (installed into .bench-cache/reference-venv)
# and recall on LoCoMo; writes docs/benchmarks.md and docs/img/*.png.
bench:
	$(PYTHON) benchmarks/run.py --full

# CI smoke run (< 2 minutes, asserts nothing about speed); report in .bench-cache/report-quick/.
bench-quick:
	$(PYTHON) benchmarks/run.py --quick

# What the LLM memories remember with the real local model (scripts/llm-server, redis-server);
# replaces its section of docs/benchmarks.md. About 5 minutes on 2 idle cores.
llm-eval:
	PYTHON=$(PYTHON) OVOS_MEMORY_WITH_LLM=1 bash scripts/with-servers $(PYTHON) benchmarks/llm_eval.py --check --write-docs

# PostgreSQL against SQLite (lexical, local-rag, hybrid at 10k and 100k exchanges; writers; LoCoMo) on a
# private durable PostgreSQL it starts and stops; writes the PostgreSQL section of docs/benchmarks.md.
bench-postgres:
	$(PYTHON) benchmarks/bench_postgres.py --write
