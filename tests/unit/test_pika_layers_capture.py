"""The layer diagnosis on the live Pika 4.0.0 capture in tests/fixtures/pika-live (its NOTICE.md says
what is true of it): both binlogs hold the same records, yet the 900 keys written with SETEX (logged as
`pksetexat key <absolute unix seconds> value`) exist on the master and not on the slave.

The binlogs are scanned as they are, by the pipeline's own Spark scan. The capture's keyspace side is a
SCAN of each db of each side: key names, no values or types. Serving those names from redis-servers
would mean inventing values, so the two keyspace snapshots are written from the names alone (present,
type unknown) and go through the real keyspace diff; the only findings that can come out are
missing/extra keys, which is all the capture can say about the data.
"""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.diagnose import diagnose
from audit.findings import findings_table
from audit.kernel.staging import finding_from_row
from audit.sources.pika.binlog import parse_file
from audit.sources.pika.binlog_format import read_manifest
from tests.conftest import FIXTURES

CAPTURE = FIXTURES / "pika-live"
DBS = (0, 1, 2)


def _presence_snapshot(names: dict[str, list[str]], path: Path) -> None:
    from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA

    rows = [
        {"db": int(db), "key": k.encode(), "type": "unknown", "status": "ok", "read_at_ms": 0}
        for db, keys in names.items()
        for k in keys
    ]
    cols = {n: [r.get(n) for r in rows] for n in SNAPSHOT_SCHEMA.names}
    pq.write_table(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA), path)


@pytest.fixture(scope="module")
def capture(spark, tmp_path_factory):  # type: ignore[no-untyped-def]
    from audit.diff.findings import keyspace_findings
    from audit.diff.keyspace import diff_snapshots
    from audit.sources.pika.layers import annotate_keyspace
    from audit.sources.pika.logfiles import discover, scan_logs

    root = tmp_path_factory.mktemp("pika-live")
    with tarfile.open(CAPTURE / "binlogs.tar.gz") as tar:
        tar.extractall(root, filter="data")
    scans = {}
    for side in ("master", "slave"):
        out = root / f"{side}-binlog.parquet"
        scan_logs(spark, discover(root / side, None, side), str(out))
        scans[side] = spark.read.parquet(str(out))
    names = json.loads((CAPTURE / "keys.json").read_text())
    for side in ("master", "slave"):
        _presence_snapshot(names[side], root / f"{side}-keys.parquet")
    cands = root / "candidates.parquet"
    diff_snapshots(spark, str(root / "master-keys.parquet"), str(root / "slave-keys.parquet"), str(cands), 2000)
    found = keyspace_findings(spark.read.parquet(str(cands)), 0)
    rows = [r.asDict() for r in annotate_keyspace(found, scans["master"], scans["slave"]).collect()]
    return SimpleNamespace(root=root, scans=scans, names=names, rows=rows)


def _detail(row: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(row["detail"])
    return loaded


def test_each_missing_setex_key_carries_its_pksetexat_record_on_both_sides(capture) -> None:  # type: ignore[no-untyped-def]
    rows = capture.rows
    missing = {(r["db"], bytes(r["key"]).decode()) for r in rows}
    expected = {
        (int(db), k)
        for db in capture.names["master"]
        for k in set(capture.names["master"][db]) - set(capture.names["slave"][db])
    }
    assert missing == expected and len(rows) == 900
    assert {r["category"] for r in rows} == {"missing_on_replica"}
    assert Counter(db for db, _ in missing) == {0: 300, 1: 300, 2: 300}
    assert all(int(k.rsplit(":", 1)[1]) % 10 == 9 for _, k in missing)  # the SETEX keys of the load
    for row in rows:
        d = _detail(row)
        m, s = d["binlog"]["master"], d["binlog"]["replica"]
        assert (m["command"], s["command"]) == ("pksetexat", "pksetexat")
        assert m["at"] == s["at"] and m["end"] == s["end"]  # the slave wrote it where the master did
        # SETEX key 3600: the absolute expiry logged is the write's exec_time + 3600 s, read back verified
        assert m["expire_at_ms"] == s["expire_at_ms"] == (m["exec_time"] + 3600) * 1000
        assert m["args_read"] == s["args_read"] == "verified"
        assert s["ttl_when_logged_ms"] > 0 and d["expired_when_replica_logged"] is False
        assert (d["layer"], d["last_command"], d["key_match"]) == ("not_applied", "pksetexat", "exact")
        assert d["master"]["type"] == "unknown"  # the diff's own detail is kept


def test_positions_match_an_independent_read_of_the_files(capture) -> None:  # type: ignore[no-untyped-def]
    """The `at`/`end` of a finding are the record's own place in the file, read without Spark."""
    log = capture.root / "master" / "log_db1"
    batch = parse_file(log / "write2file0", db=1, filenum=0, logical_end=read_manifest(log).pro_offset)
    records = [r for r in batch.to_pylist() if r["key"] == b"live:1:1009"]
    assert [r["command"] for r in records] == ["pksetexat"]
    (row,) = [r for r in capture.rows if r["db"] == 1 and bytes(r["key"]) == b"live:1:1009"]
    m = _detail(row)["binlog"]["master"]
    assert (m["at"], m["end"], m["exec_time"]) == (
        f"0:{records[0]['start']}",
        f"0:{records[0]['end']}",
        records[0]["exec_time"],
    )


def test_horizons_show_two_complete_binlogs(capture) -> None:  # type: ignore[no-untyped-def]
    per_db = {}
    for row in capture.rows:
        h = _detail(row)["binlog"]["horizon"]
        per_db[row["db"]] = h
        assert h["master"] == h["replica"]  # same records, same places
        assert h["master"]["complete"] is True and h["master"]["first"] == "0:0"
    manifests = {db: read_manifest(capture.root / "master" / f"log_db{db}") for db in DBS}
    assert {db: h["master"]["last"] for db, h in per_db.items()} == {
        db: f"0:{m.pro_offset}" for db, m in manifests.items()
    }
    assert sum(h["master"]["records"] for h in per_db.values()) == 10_610  # the NOTICE's count


def _diagnosed(capture) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    found = diagnose("pika", [finding_from_row(r) for r in capture.rows])
    return [f.to_row("run", "pika-live", "pika") for f in found]


def test_catalog_says_not_applied_for_all_of_them(capture) -> None:  # type: ignore[no-untyped-def]
    assert Counter(r["diagnosis"] for r in _diagnosed(capture)) == {"PIKA_NOT_APPLIED": 900}


def test_one_group_of_900_keys_written_by_pksetexat(spark, capture, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.pika.layer_groups import collect_groups, group_by_command, layer_groups, render_groups

    path = tmp_path / "pika-live.parquet"  # the pair's findings file, as the sink writes it
    pq.write_table(findings_table(_diagnosed(capture)), path)
    (group,) = layer_groups(path)  # streamed with pyarrow: what the summary can call without Spark
    assert collect_groups(group_by_command(spark.read.parquet(str(path)))) == [group]  # the Spark transform agrees
    assert (group.layer, group.command, group.category, group.diagnosis) == (
        "not_applied",
        "pksetexat",
        "missing_on_replica",
        "PIKA_NOT_APPLIED",
    )
    assert group.count == 900 and group.per_db == {0: 300, 1: 300, 2: 300}
    assert group.sample_keys == sorted(group.sample_keys) and len(group.sample_keys) == 5
    assert all(k.startswith("live:0:") for k in group.sample_keys)  # the smallest keys in byte order
    assert render_groups([group]) == [
        "900 keys written by pksetexat are shipped but absent on the slave "
        "(missing_on_replica; db0: 300, db1: 300, db2: 300)"
    ]
