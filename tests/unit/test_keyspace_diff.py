"""The Spark diff transforms on a handful of rows (one local session for the whole test run)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from audit.diff.keyspace import candidates, classify, coverage_metrics, join_sides, latest_read
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA


def snap(spark, rows):  # type: ignore[no-untyped-def]
    cols = {n: [r.get(n) for r in rows] for n in SNAPSHOT_SCHEMA.names}
    return spark.createDataFrame(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA))


def row(key: bytes, **kw: object) -> dict[str, object]:
    base = {
        "db": 0,
        "key": key,
        "type": "string",
        "ttl_ms": None,
        "expire_at_ms": None,
        "length": 1,
        "digest": "d",
        "status": "ok",
        "error": None,
        "read_at_ms": 1000,
    }
    return {**base, **kw}


def test_each_category_and_nothing_else(spark) -> None:  # type: ignore[no-untyped-def]
    master = snap(
        spark,
        [
            row(b"same"),
            row(b"gone"),
            row(b"val", digest="a"),
            row(b"typ"),
            row(b"ttl", ttl_ms=60_000, expire_at_ms=61_000),
            row(b"ttl-ok", ttl_ms=60_000, expire_at_ms=61_000),
            row(b"bad", status="error", error="NOPERM"),
            row(b"\x00\xffbin"),
        ],
    )
    replica = snap(
        spark,
        [
            row(b"same"),
            row(b"val", digest="b"),
            row(b"typ", type="list"),
            row(b"extra"),
            row(b"ttl", ttl_ms=660_000, expire_at_ms=661_000),
            row(b"ttl-ok", ttl_ms=59_000, expire_at_ms=61_500),
            row(b"bad", digest="zzz"),
            row(b"\x00\xffbin"),
        ],
    )
    classified = classify(join_sides(latest_read(master), latest_read(replica)), 2000)
    got = {(bytes(r.key), r.category) for r in candidates(classified).collect()}
    assert got == {
        (b"gone", "missing_on_replica"),
        (b"extra", "extra_on_replica"),
        (b"val", "value_mismatch"),
        (b"typ", "type_mismatch"),
        (b"ttl", "ttl_mismatch"),
    }
    m = coverage_metrics(classified).collect()[0]
    assert (m.master_keys, m.replica_keys, m.keys_compared, m.master_keys_unreadable, m.candidates) == (8, 8, 6, 1, 5)


def test_scan_duplicates_keep_the_later_read(spark) -> None:  # type: ignore[no-untyped-def]
    master = snap(spark, [row(b"k", digest="old", read_at_ms=1), row(b"k", digest="new", read_at_ms=2)])
    replica = snap(spark, [row(b"k", digest="new")])
    classified = classify(join_sides(latest_read(master), latest_read(replica)), 2000)
    assert candidates(classified).count() == 0
    assert coverage_metrics(classified).collect()[0].master_scan_duplicates == 1


def test_unstable_read_is_a_candidate_for_recheck(spark) -> None:  # type: ignore[no-untyped-def]
    classified = classify(
        join_sides(latest_read(snap(spark, [row(b"k", status="unstable")])), latest_read(snap(spark, [row(b"k")]))),
        2000,
    )
    assert [r.category for r in candidates(classified).collect()] == ["value_mismatch"]


def test_the_narrow_job_writes_what_classifying_every_column_gives(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    from audit.diff.keyspace import diff_snapshots, diff_snapshots_wide

    def write(name: str, rows: list[dict[str, object]]) -> str:
        cols = {n: [r.get(n) for r in rows] for n in SNAPSHOT_SCHEMA.names}
        pq.write_table(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA), tmp_path / name)
        return str(tmp_path / name)

    master = write(
        "m.parquet",
        [
            row(b"same"),
            row(b"gone", ttl_ms=5, expire_at_ms=1005),
            row(b"val", digest="a"),
            row(b"len", length=2),
            row(b"typ"),
            row(b"ttl", ttl_ms=60_000, expire_at_ms=61_000),
            row(b"bad", status="error", error="NOPERM", digest=None),
            row(b"dup", digest="old", read_at_ms=1),
            row(b"dup", digest="new", read_at_ms=2),
            row(b"gone-twice", read_at_ms=1),
            row(b"gone-twice", read_at_ms=2),
            row(b"uns", status="unstable", digest=None),
            row(b"\x00\xffbin", digest="x"),
        ],
    )
    replica = write(
        "r.parquet",
        [
            row(b"same"),
            row(b"val", digest="b"),
            row(b"len"),
            row(b"typ", type="list"),
            row(b"extra"),
            row(b"ttl", ttl_ms=660_000, expire_at_ms=661_000),
            row(b"bad", digest="zzz"),
            row(b"dup", digest="new"),
            row(b"rdup", digest="new", read_at_ms=2),
            row(b"rdup", digest="old", read_at_ms=1),
            row(b"uns"),
            row(b"\x00\xffbin", digest="y"),
        ],
    )

    def metrics_lost(*a: Any) -> dict[str, int]:
        # a Spark Connect 4.1 server under load answers a write without its observed metrics (SPARK-54279)
        from pyspark.sql import Observation

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Observation, "get", property(lambda self: {}))
            return diff_snapshots(*a)

    outs, schemas = {}, {}
    jobs = {
        "narrow": diff_snapshots,  # the second pass in the driver (few candidates, local files)
        "narrow, second pass in Spark": lambda *a: diff_snapshots(*a, max_driver_candidates=0),
        "narrow, observed metrics lost": metrics_lost,
        "wide": diff_snapshots_wide,
    }
    for name, job in jobs.items():
        coverage = job(spark, master, replica, str(tmp_path / name), 2000)
        read = spark.read.parquet(str(tmp_path / name))
        schemas[name] = read.schema
        outs[name] = (coverage, sorted((tuple(r.asDict().items()) for r in read.collect()), key=repr))
    assert (
        outs["narrow"] == outs["narrow, second pass in Spark"] == outs["narrow, observed metrics lost"] == outs["wide"]
    )
    assert schemas["narrow"] == schemas["narrow, second pass in Spark"]
    assert {dict(r)["category"] for r in outs["narrow"][1]} == {
        "missing_on_replica",
        "extra_on_replica",
        "value_mismatch",
        "type_mismatch",
        "ttl_mismatch",
    }
    coverage = outs["narrow"][0]
    assert coverage["candidates"] == 10
    assert (coverage["master_scan_duplicates"], coverage["replica_scan_duplicates"]) == (2, 1)


def test_narrow_pair_keeps_each_sides_latest_read_and_nulls_for_an_absent_side(spark) -> None:  # type: ignore[no-untyped-def]
    from audit.diff.keyspace import narrow_pair

    master = snap(spark, [row(b"k", digest="old", read_at_ms=1), row(b"k", digest="new", read_at_ms=3), row(b"m")])
    replica = snap(spark, [row(b"k", digest="new", read_at_ms=2), row(b"r", read_at_ms=7), row(b"r", read_at_ms=5)])
    got = {bytes(r.key): r for r in narrow_pair(master, replica).collect()}
    assert (got[b"k"].m_read_at_ms, got[b"k"].r_read_at_ms, got[b"k"].m_reads, got[b"k"].r_reads) == (3, 2, 2, 1)
    assert got[b"k"].m_vh == got[b"k"].r_vh  # the master's later read (digest "new") won
    assert got[b"m"].r_reads is None and got[b"m"].r_th is None and got[b"m"].r_read_at_ms is None
    assert got[b"r"].m_reads is None and got[b"r"].m_th is None
    assert (got[b"r"].r_read_at_ms, got[b"r"].r_reads) == (7, 2)


def test_a_healthy_pair_writes_no_candidate_in_the_candidates_schema(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    from audit.diff.keyspace import diff_snapshots

    paths = []
    for side in ("m", "r"):
        rows = [row(b"a"), row(b"b", ttl_ms=60_000, expire_at_ms=61_000), row(b"c", digest="z", length=3)]
        cols = {n: [r.get(n) for r in rows] for n in SNAPSHOT_SCHEMA.names}
        pq.write_table(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA), tmp_path / f"{side}.parquet")
        paths.append(str(tmp_path / f"{side}.parquet"))
    schemas = []
    for driver_max in (0, 10):  # the second pass in Spark, then in the driver
        coverage = diff_snapshots(spark, *paths, str(tmp_path / "cands"), 2000, max_driver_candidates=driver_max)
        assert coverage["candidates"] == 0 and coverage["keys_compared"] == 3
        # the recheck reads the file whatever it holds: empty, with every column a candidate has
        read = spark.read.parquet(str(tmp_path / "cands"))
        assert read.count() == 0
        assert {"db", "key", "category", "m_digest", "r_digest", "m_reads", "r_reads"} <= set(read.columns)
        schemas.append(read.schema)
    assert schemas[0] == schemas[1]
