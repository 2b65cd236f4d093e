# The two commands of the README: `make demo` and `make test`. Both set up what they need first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint bench clean
setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) scripts/demo.py

test: setup
	@$(VENV)/bin/ruff check audit dags providers tests bench scripts
	@$(VENV)/bin/mypy
	@$(PY) -m pytest -q -ra tests

lint: setup
	@$(VENV)/bin/ruff check audit dags providers tests bench scripts && $(VENV)/bin/mypy

bench: setup
	@$(PY) bench/snapshot_bench.py && $(PY) bench/diff_bench.py && $(PY) bench/pika_binlog_bench.py --spark \
		&& $(PY) bench/rmq_commitlog_bench.py

clean:
	rm -rf .demo .pytest_cache
