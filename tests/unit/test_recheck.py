"""The recheck's per-key rule against the diff's Spark rule, and the hot-key bracketing, without servers."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from audit.diff.keyspace import classify, join_sides, latest_read
from audit.sources.redis.hotkeys import Sample, bracket
from audit.sources.redis.keys import VANISHED, KeyState
from audit.sources.redis.recheck import _divergent_frame, _same_master_value, category_of
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA


def state(key: bytes, **kw: Any) -> KeyState:
    base: dict[str, Any] = {
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
    return KeyState(**{**base, **kw})


def states_frame(spark, reads: list[tuple[int, KeyState]]):  # type: ignore[no-untyped-def]
    """Reads as a snapshot frame (vanished keys left out, as a snapshot leaves them): the Spark rule's input."""
    present = [(db, s) for db, s in reads if s.status != VANISHED]
    rows: dict[str, list[Any]] = {"db": [db for db, _ in present]}
    for name in SNAPSHOT_SCHEMA.names[1:]:
        rows[name] = [getattr(s, name) for _, s in present]
    return spark.createDataFrame(pa.Table.from_pydict(rows, schema=SNAPSHOT_SCHEMA))


CASES: list[tuple[bytes, dict[str, Any] | None, dict[str, Any] | None]] = [
    (b"same", {}, {}),
    (b"gone", {}, None),
    (b"extra", None, {}),
    (b"type", {}, {"type": "hash"}),
    (b"value", {}, {"digest": "x"}),
    (b"length", {}, {"length": 2}),
    (b"unstable", {"status": "unstable"}, {}),
    (b"ttl-one-sided", {"expire_at_ms": 5000}, {}),
    (b"ttl-drift", {"expire_at_ms": 5000}, {"expire_at_ms": 9000}),
    (b"ttl-skew", {"expire_at_ms": 5000}, {"expire_at_ms": 6500}),
    (b"unreadable", {"status": "error", "error": "boom"}, {}),
    (b"vanished", {"status": "vanished"}, None),
]


def test_the_per_key_rule_is_the_diffs_rule(spark) -> None:  # type: ignore[no-untyped-def]
    tolerance = 2000
    m = [(0, state(k, **kw)) for k, kw, _ in CASES if kw is not None]
    r = [(0, state(k, **kw)) for k, _, kw in CASES if kw is not None]
    joined = join_sides(latest_read(states_frame(spark, m)), latest_read(states_frame(spark, r)))
    by_spark = {bytes(x["key"]): x["category"] for x in classify(joined, tolerance).collect()}
    for key, mkw, rkw in CASES:
        ms = state(key, **mkw) if mkw is not None else None
        rs = state(key, **rkw) if rkw is not None else None
        assert category_of(ms, rs, tolerance) == by_spark.get(key), key


def test_the_survivors_are_the_rows_the_diffs_rule_gives(spark) -> None:  # type: ignore[no-untyped-def]
    # the recheck builds its survivors in the driver; the same rows, columns and types as the Spark rule's
    tolerance = 2000
    divergent = {
        (0, k): (state(k, **mkw) if mkw is not None else None, state(k, **rkw) if rkw is not None else None)
        for k, mkw, rkw in CASES
    }
    built = _divergent_frame(spark, divergent, tolerance)
    m = [(0, s) for s, _ in divergent.values() if s is not None]
    r = [(0, s) for _, s in divergent.values() if s is not None]
    joined = join_sides(latest_read(states_frame(spark, m)), latest_read(states_frame(spark, r)))
    by_spark = classify(joined, tolerance).where("category IS NOT NULL").drop("unreadable")
    assert dict(built.dtypes) == dict(by_spark.dtypes)
    rows = {bytes(x["key"]): x.asDict() for x in built.collect()}
    assert rows == {bytes(x["key"]): x.asDict() for x in by_spark.collect()}
    assert set(rows) == {b"gone", b"extra", b"type", b"value", b"length", b"unstable", b"ttl-one-sided", b"ttl-drift"}
    assert _divergent_frame(spark, {}, tolerance).count() == 0


def test_a_master_value_that_moved_is_not_the_same() -> None:
    assert _same_master_value(state(b"k"), state(b"k", expire_at_ms=None, read_at_ms=9), 2000)
    assert not _same_master_value(state(b"k"), state(b"k", digest="e"), 2000)
    assert not _same_master_value(state(b"k"), None, 2000)
    assert _same_master_value(None, state(b"k", status="vanished"), 2000)
    assert _same_master_value(state(b"k", expire_at_ms=10_000), state(b"k", expire_at_ms=11_000), 2000)
    assert not _same_master_value(state(b"k", expire_at_ms=10_000), state(b"k"), 2000)


V1, V2 = ("string", 1, "a", None), ("string", 1, "b", None)
T1, T1_SKEWED, T_FAR = ("string", 1, "a", 100_000), ("string", 1, "a", 101_500), ("string", 1, "a", 700_000)


@pytest.mark.parametrize(
    ("samples", "replica", "expected"),
    [
        ([(10, V1), (20, V1)], (15, V1), True),  # bracketed by one value: the replica holds it
        ([(10, V1), (20, V1)], (15, V2), False),  # ... or it diverges
        ([(10, V1), (20, V2)], (15, V1), None),  # the key changed inside the bracket: undecided
        ([(10, V1), (20, V2), (30, V2)], (25, V2), True),
        ([(10, V1), (20, V1)], (5, V1), None),  # the replica is not there yet
        ([(10, V1), (20, V2)], (20, V1), False),  # exactly at a sample: that sample's value
        ([(10, None), (20, None)], (12, None), True),  # absent on both
        ([(10, None), (20, None)], (12, V1), False),
        # expiry: absolute times, equal within the tolerance (the reads' skew), else a value of its own
        ([(10, T1), (20, T1_SKEWED)], (15, T1_SKEWED), True),
        ([(10, T1), (20, T1)], (15, T_FAR), False),
        ([(10, T1), (20, T1)], (15, V1), False),  # an expiry on one side only
        ([(10, T1), (20, T_FAR)], (15, T1), None),  # the master's expiry moved inside the bracket
    ],
)
def test_bracketing_the_replicas_offset(
    samples: list[tuple[int, Any]], replica: tuple[int, Any], expected: bool | None
) -> None:
    agrees, _ = bracket([Sample(o, v) for o, v in samples], Sample(*replica), 2000)
    assert agrees is expected


def test_an_offset_of_another_replication_stream_brackets_nothing() -> None:
    # a replica re-pointed at another server mid-audit counts its offset in that server's stream: it
    # fell between two samples of this master's and its differing value was judged a divergence
    samples = [Sample(10, V1, "aaaa"), Sample(20, V1, "aaaa")]
    assert bracket(samples, Sample(15, V2, "bbbb"), 2000) == (None, None)
    assert bracket(samples, Sample(15, V2, "aaaa"), 2000)[0] is False
    assert bracket([Sample(10, V1), Sample(20, V1)], Sample(15, V1, "bbbb"), 2000)[0] is True  # no id: offsets only


def test_split_for_recheck_parts_complement_each_other_however_often_evaluated(spark) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.redis.recheck import split_for_recheck

    rows = [(db, f"k{i}".encode(), "value_mismatch") for db in (0, 1) for i in range(500)]
    cands = spark.createDataFrame(rows, "db int, key binary, category string").repartition(7)
    keys = lambda df: [(r["db"], bytes(r["key"])) for r in df.collect()]  # noqa: E731
    to_check, rest = split_for_recheck(cands, 300, len(rows))
    assert rest is not None
    first, again, remaining = keys(to_check), keys(to_check), keys(rest)
    assert sorted(first) == sorted(again) == sorted((db, key) for db, key, _ in rows)[:300]  # the first by (db, key)
    assert len(remaining) == 700 and not set(first) & set(remaining)
    assert set(first) | set(remaining) == {(db, key) for db, key, _ in rows}
    everything, none = split_for_recheck(cands, 1000, len(rows))
    assert none is None and everything is cands
