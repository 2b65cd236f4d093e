# The two commands of the README: `make demo` and `make test`. Both set up what they need first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-slow unit lint bench fuzz clean
setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) scripts/demo.py

SRC := audit dags providers tests bench scripts

# The suite in TEST_WORKERS pytest-xdist workers: most of its time is spent waiting on servers, Spark and
# Airflow, not computing. `--dist loadfile`: a module's tests stay in one worker, in order, so its
# module-scoped servers and runs are set up once (tests/unit/test_xdist_groups.py checks it). The
# slowest tests are listed at the end, to keep the suite's time in sight.
TEST_WORKERS ?= 3

test: setup lint
	@$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile --durations=15 -m "not slow" tests

# The tests marked `slow`, left out of `make test` (and so of CI): each starts a Spark standalone cluster
# or a Connect server of its own, or builds the driver's class archive: about 6 CPU-minutes together; and
# the Pika binlog diff on four more seeds of random pairs against tests/pika_oracle.py (about 4 minutes);
# and kind mysql on a replica applying in parallel in its aggressive and conservative modes (about 40 s).
# Run them before changing audit/diff/ or the Connect server (README, "The two commands").
test-slow: setup
	@$(PY) -m pytest -q -ra -n 2 --dist loadfile --durations=10 -m slow tests

# The fast tests: no server, no Airflow (Spark local runs in-process).
unit: setup
	@$(PY) -m pytest -q -ra tests/unit -m "not integration and not airflow"

lint: setup
	@$(VENV)/bin/ruff check $(SRC) && $(VENV)/bin/ruff format --check $(SRC) && $(VENV)/bin/mypy

# Every bench prints its rates next to a baseline measured in the same run (docs/performance.md). DuckDB
# (the diff's peer) is a bench-only dependency; a peer that is not installed is reported as skipped.
bench: setup
	@$(VENV)/bin/pip install -q duckdb >/dev/null 2>&1 || echo "bench: duckdb not installed: its baseline is skipped"
	@$(PY) bench/e2e_bench.py --spark-connect && $(PY) bench/snapshot_bench.py --sides && $(PY) bench/pacing_bench.py \
		&& $(PY) bench/diff_bench.py && $(PY) bench/pika_binlog_bench.py --spark --memory \
		&& $(PY) bench/pika_diff_bench.py && $(PY) bench/pika_layers_bench.py && $(PY) bench/rmq_commitlog_bench.py && $(PY) bench/memory_bench.py \
		&& $(PY) bench/fleet_snapshot_bench.py && $(PY) bench/mysql_bench.py --spark && $(PY) bench/digest_bench.py

# The binary log readers' property tests with FUZZ_SCALE (default 40) times the CI examples, random seeds,
# and the tests marked `fuzz`; failing inputs land in tests/fuzz_corpus/found/ (tests/fuzz_budget.py).
fuzz: setup
	@HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -ra -p no:cacheprovider --timeout 0 tests/unit/test_rmq_fuzz.py \
		tests/unit/test_pika_fuzz.py tests/unit/test_fuzz_corpus.py

clean:
	rm -rf .demo .pytest_cache
