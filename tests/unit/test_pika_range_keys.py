"""The keys of the binlog diff's missing/duplicate ranges, on binlogs written byte-exactly with a gap and
with a replayed batch (tests/pika_scenarios.py), checked against the command lists that wrote them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from audit.findings import FINDINGS_SCHEMA, Finding
from tests.pika_scenarios import commands, double_trysync_plan, gap_plan, healthy_plan, write_master, write_slave
from tests.pika_spark import diff_binlogs, scan_sides

FILE_SIZE = 64 * 1024


def _scan_and_diff(spark, root: Path):  # type: ignore[no-untyped-def]
    m, s = scan_sides(spark, root)
    return m, s, diff_binlogs(spark, m, s, root / "work", 2).findings


def _firsts(keys: list[bytes]) -> list[bytes]:
    return list(dict.fromkeys(keys))


def _detail(rows: list[Any], category: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["category"] == category]
    loaded: dict[str, Any] = json.loads(row["detail"])
    return loaded


def test_keys_of_a_gap_and_of_a_replay(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.pika.range_keys import keys_of_ranges

    n, gap, resume, batch = 1600, (600, 400), 1200, 60
    cmds = {db: commands(n, db) for db in (0, 1)}
    logs = {db: write_master(tmp_path / "m", db, cmds[db], FILE_SIZE) for db in (0, 1)}
    write_slave(tmp_path / "s", 0, logs[0], gap_plan(n, *gap), FILE_SIZE)
    write_slave(tmp_path / "s", 1, logs[1], double_trysync_plan(n, resume=resume, batch=batch), FILE_SIZE)
    m, s, found = _scan_and_diff(spark, tmp_path)
    assert sorted(r["category"] for r in found.collect()) == ["duplicate_range", "missing_range"]
    rows = keys_of_ranges(found, m, s).collect()
    assert len(rows) == found.count()

    lost = cmds[0][gap[0] : gap[0] + gap[1]]
    want = _firsts([c[1] for c in lost])
    d = _detail(rows, "missing_range")
    assert d["keys_total"] == d["keys"]["total"] == len(want) > 100
    assert d["keys"]["first"] == [k.decode() for k in want[:100]]
    last_at = {c[1]: i for i, c in enumerate(cmds[0])}
    in_range = {k for k in want if gap[0] <= last_at[k] < gap[0] + gap[1]}
    assert d["keys"]["last_written_in_range"] == len(in_range) > 0
    assert d["slave_data"] is None and d["keys_differing_on_slave"] is None  # no keyspace audited
    assert d["first_command"] == lost[0][0].decode()  # the binlog diff's own detail is kept

    replayed = cmds[1][resume : resume + batch]
    d = _detail(rows, "duplicate_range")
    assert d["keys"]["first"] == [k.decode() for k in _firsts([c[1] for c in replayed])]
    assert d["non_idempotent_records"] == sum(c[0] in (b"incr", b"lpush") for c in replayed) > 0


def test_slave_data_of_the_range_keys_from_the_keyspace_findings(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.pika.range_keys import keys_of_ranges

    n, gap = 1500, (700, 30)
    cmds = commands(n, 0)
    log = write_master(tmp_path / "m", 0, cmds, FILE_SIZE)
    write_slave(tmp_path / "s", 0, log, gap_plan(n, *gap), FILE_SIZE)
    other = write_master(tmp_path / "m", 1, commands(n, 1), FILE_SIZE)
    write_slave(tmp_path / "s", 1, other, healthy_plan(0, n), FILE_SIZE)
    m, s, found = _scan_and_diff(spark, tmp_path)
    touched = _firsts([c[1] for c in cmds[gap[0] : gap[0] + gap[1]]])
    differing = {touched[0]: "value_mismatch", touched[3]: "missing_on_replica", b"elsewhere": "missing_on_replica"}
    ks_rows = [Finding("keyspace", cat, db=0, key=k).to_row("run", "p", "pika") for k, cat in differing.items()] + [
        Finding("keyspace", "missing_on_replica", db=1, key=touched[1]).to_row("run", "p", "pika")
    ]  # other db
    ks = spark.createDataFrame(pa.Table.from_pylist(ks_rows, schema=FINDINGS_SCHEMA))
    d = _detail(keys_of_ranges(found, m, s, ks).collect(), "missing_range")
    assert d["keys_differing_on_slave"] == d["slave_data"]["keys_differing"] == 2
    assert d["slave_data"]["by_category"] == {
        "missing_on_replica": 1,
        "extra_on_replica": 0,
        "type_mismatch": 0,
        "value_mismatch": 1,
        "ttl_mismatch": 0,
    }
    assert d["slave_data"]["first_differing"] == [touched[0].decode(), touched[3].decode()]
