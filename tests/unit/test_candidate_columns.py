"""The diff's second pass in the driver: Hadoop globs, an empty side, and the same rows as the Spark pass."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.diff.candidate_columns import arrow_schema, expand_braces
from audit.diff.keyspace import SNAPSHOT_DDL, diff_snapshots
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA


@pytest.mark.parametrize(
    ("pattern", "expanded"),
    [
        ("keys.parquet/part-*.parquet", ["keys.parquet/part-*.parquet"]),
        ("k/{a-*.parquet,b-*.parquet}", ["k/a-*.parquet", "k/b-*.parquet"]),
        ("{a,b}{c,d}", ["ac", "ad", "bc", "bd"]),
        ("x{a,{b,c}}y", ["xay", "xby", "xcy"]),
        ("x{a", ["x{a"]),
    ],
)
def test_hadoop_brace_globs_expand_to_python_globs(pattern: str, expanded: list[str]) -> None:
    assert expand_braces(pattern) == expanded


def test_the_snapshot_ddl_reads_as_the_snapshot_schema() -> None:
    assert arrow_schema(SNAPSHOT_DDL) == SNAPSHOT_SCHEMA.remove_metadata()


def _write(path: Path, keys: list[bytes], digest: str) -> None:
    rows = [
        {"db": 0, "key": k, "type": "hash", "length": 3, "digest": digest, "status": "ok", "read_at_ms": 5}
        for k in keys
    ]
    cols = {n: [r.get(n) for r in rows] for n in SNAPSHOT_SCHEMA.names}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA), path)


def test_shard_globs_and_an_empty_side_give_the_spark_pass_rows(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    master = tmp_path / "master" / "keys.parquet"
    _write(master / "shard-0-part-00000.parquet", [b"a", b"b"], "same")
    _write(master / "shard-1-part-00000.parquet", [b"c", b"d"], "m")
    _write(master / "shard-2-part-00000.parquet", [b"e"], "not read: outside the glob")
    replica = tmp_path / "replica" / "keys.parquet"
    _write(replica / "shard-0-part-00000.parquet", [b"a", b"b"], "same")
    _write(replica / "shard-1-part-00000.parquet", [b"c"], "r")
    empty = tmp_path / "empty"
    empty.mkdir()
    m_glob = str(master / "{shard-0-part-*.parquet,shard-1-part-*.parquet}")
    r_glob = str(replica / "shard-*-part-*.parquet")
    for m_path, r_path, expected in (
        (m_glob, r_glob, {b"c": "value_mismatch", b"d": "missing_on_replica"}),
        (m_glob, str(empty), dict.fromkeys([b"a", b"b", b"c", b"d"], "missing_on_replica")),
    ):
        outs = []
        for driver_max in (0, 10):  # the second pass in Spark, then in the driver
            out = tmp_path / f"cands-{driver_max}"
            diff_snapshots(spark, m_path, r_path, str(out), 2000, max_driver_candidates=driver_max)
            read = spark.read.parquet(str(out))
            outs.append((read.schema, sorted((tuple(r.asDict().items()) for r in read.collect()), key=repr)))
        assert outs[0] == outs[1]
        assert {dict(r)["key"]: dict(r)["category"] for r in outs[1][1]} == expected
