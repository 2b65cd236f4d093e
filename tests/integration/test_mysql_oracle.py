"""Kind mysql against an independent oracle (tests/mysql_oracle.py): random tables on a real MariaDB
master and GTID replica, random divergences planted on the replica alone (replication stays healthy),
and what the audit reports compared with what both tables read whole in plain Python say it must.

A few seeds here; sweep many more with `MYSQL_ORACLE_SEEDS=1-200` (each seed is one schema of four
tables, a few of them with another definition on the replica).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from audit.local.mariadb_server import mariadb_available
from audit.sources.mysql.endpoint import MySQLSettings
from tests import mysql_oracle as oracle
from tests import mysql_scenarios as scenarios
from tests.integration.mysql_pair import FAST, Pair, start_module_pair

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]


def _seeds() -> list[int]:
    spec = os.environ.get("MYSQL_ORACLE_SEEDS", "")
    if not spec:
        return [3, 10, 11, 29, 37]  # 10: a latin1 composite key (l1comp)
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-oracle"))


def settings_for(seed: int) -> MySQLSettings:
    """FAST, with chunk, fetch and segment sizes, hash and recheck rounds drawn per seed: chunks of one
    row to all of them, fetches of one key, tables split over tasks."""
    rng = random.Random(seed * 7919)
    low = rng.choice([1, 3, 50, 50])
    return FAST.model_copy(
        update={
            "min_chunk_rows": low,
            "max_chunk_rows": max(low, rng.choice([5, 400, 400, 3000])),
            "fetch_rows": rng.choice([1, 2, 40, 40, 500]),
            "hash_function": rng.choice(["crc32", "crc32", "md5"]),
            "recheck_rounds": rng.choice([0, 1, 3]),
            "parallelism": rng.choice([None, None, 2, 3]),
            "min_segment_rows": rng.choice([100_000, 20]),
            "max_fetch_bytes": rng.choice([1 << 20, 64 << 20]),
        }
    )


@pytest.mark.parametrize("seed", _seeds())
def test_audit_agrees_with_the_oracle(pair: Pair, seed: int) -> None:
    rng = random.Random(seed)
    schema = pair.new_schema()
    tables = [scenarios.random_table(rng, f"t{i}") for i in range(4)]
    pair.on_master(*(t.ddl(schema) for t in tables), *(s for t in tables for s in scenarios.inserts(schema, t)))
    notes = {}
    for t in tables:
        scenarios.vary_replica(rng, schema, t, pair.on_replica_only, 0.25)
        statements, notes[t.name] = scenarios.plant(rng, schema, t, rng.choice([0, 1, 2, 3, 6]))
        pair.on_replica_only(*statements)

    result = pair.audit([f"{schema}.*"], settings_for(seed))

    problems = []
    summaries = {s["table"]: s for s in result.tables}
    with oracle.raw_connect(pair.master) as m, oracle.raw_connect(pair.replica) as r:
        for t in tables:
            name = f"{schema}.{t.name}"
            want = oracle.expected(t, oracle.read_side(m, schema, t), oracle.read_side(r, schema, t))
            found = [f for f in result.findings if f.evidence.get("table") == name]
            problems += oracle.problems(t, want, found, summaries[name])
    assert not result.uncovered
    assert result.metrics["rows_compared"] >= max(result.metrics["master_rows"], result.metrics["replica_rows"])
    assert not problems, "\n".join(problems + [f"planted on {n}: {v}" for n, v in notes.items()])
