# Developer shortcuts. PYTHON must have this package installed with its [all,dev] extras:
# .venv/bin/python when scripts/test has made it, else python (or say, e.g. make bench PYTHON=...).
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python)

# The fast lane: unit and contract tests, no server (redis, PostgreSQL), no real local model, and
# not the tests marked heavy (the reliability suite, processes racing on one store, long text
# through the embedding model) or slow. A test that starts redis-server without its marker fails here.
FAST = not heavy and not slow and not redis and not postgres and not llm and not persona$(NO_BROWSER)
# The browser tests need Debian's chromium-driver, which `make test` (scripts/test) installs: on a
# machine without it the fast lane leaves them to the whole suite instead of failing.
NO_BROWSER = $(if $(wildcard /usr/bin/chromedriver),, and not browser)

.PHONY: test test-fast docs reliability-report bench bench-quick llm-eval bench-postgres

# The whole suite as CI runs it (installs and starts what it needs; see README).
test:
	bash scripts/test

# About 2 minutes on 2 busy cores (README); the whole suite stays `make test`.
test-fast:
	env -u OVOS_MEMORY_REDIS_URL -u OVOS_MEMORY_POSTGRES_URL -u OVOS_MEMORY_REQUIRE_POSTGRES \
		-u OVOS_MEMORY_TEST_LLM_URL OVOS_MEMORY_TEST_NO_SERVERS=1 \
		$(PYTHON) -m pytest -p no:cacheprovider -q -m "$(FAST)"

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
