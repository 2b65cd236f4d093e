"""Each layer of the diagnosis on binlogs written byte-exactly (audit/local/pika_binlog.py), one case per
db of one master/slave pair, scanned by the pipeline's own Spark scan. The keyspace findings are planted
(the data a real pair would hold is what the finding says); the binlogs decide the layer.

| db | master's binlog                                    | slave's binlog                        |
|----|----------------------------------------------------|---------------------------------------|
| 0  | complete; a key logged and shipped, one whose      | the same up to the last record; the   |
|    | pksetexat expires before the slave logs it, a last | pksetexat logged 10 s after the master |
|    | record not yet shipped, a 1500-byte key            |                                       |
| 1  | a record in the middle, and an earlier write of a  | lacks both                            |
|    | key written again later                            |                                       |
| 2  | INCR ctr once                                      | INCR ctr twice; a write of its own    |
| 3  | write2file0 purged: a key only written there       | keeps write2file0                     |
| 4  | a key written before the slave's full sync; a      | padding up to the sync point, then    |
|    | RENAME (a record naming a second key)              | the rest                              |
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.diagnose import diagnose
from audit.findings import FINDINGS_SCHEMA, Finding
from audit.kernel.staging import finding_from_row
from audit.local.pika_binlog import BinlogWriter
from tests.pika_spark import diff_binlogs, scan_sides

T0 = 1_700_000_000
LONG = b"L" * 1500  # longer than the scan's 1024-byte key prefix
Cmd = list[bytes]


def _write(root: Path, db: int, records: list[tuple[Cmd, int]], *, file_size: int = 1 << 20, pad_to: Any = None):  # type: ignore[no-untyped-def]
    w = BinlogWriter(root / f"log_db{db}", file_size=file_size, term=1)
    if pad_to is not None:
        w.set_producer_status(*pad_to)
    positions = [w.append(c, exec_time=t) for c, t in records]
    w.close()
    return positions


def _set(key: bytes, value: bytes = b"v") -> Cmd:
    return [b"set", key, value]


def _fillers(n: int, t: int) -> list[tuple[Cmd, int]]:
    return [(_set(b"fill:%d" % i, b"x" * 40), t) for i in range(n)]


def write_pair(root: Path) -> None:
    m, s = root / "m", root / "s"
    # db0
    shipped = [
        (_set(b"a:applied"), T0),
        ([b"pksetexat", b"exp:late", b"%d" % (T0 + 5), b"v"], T0),
        (_set(LONG), T0),
    ]
    _write(m, 0, [*shipped, (_set(b"lag:k"), T0 + 1)])
    _write(s, 0, [shipped[0], (shipped[1][0], T0 + 10), shipped[2]])
    # db1
    _write(m, 1, [(_set(b"g:1"), T0), (_set(b"gap:x"), T0), (_set(b"w:k", b"a"), T0), (_set(b"w:k", b"b"), T0 + 1)])
    _write(s, 1, [(_set(b"g:1"), T0), (_set(b"w:k", b"b"), T0 + 1)])
    # db2
    _write(m, 2, [([b"incr", b"ctr"], T0), (_set(b"r:1"), T0)])
    _write(s, 2, [([b"incr", b"ctr"], T0), ([b"incr", b"ctr"], T0), (_set(b"r:1"), T0), (_set(b"own:k"), T0 + 2)])
    # db3: 4 KiB files, write2file0 purged on the master only
    history = [(_set(b"old:k"), T0), *_fillers(300, T0 + 1)]
    _write(m, 3, history, file_size=4096)
    _write(s, 3, history, file_size=4096)
    (m / "log_db3" / "write2file0").unlink()
    # db4: the slave was full-synced right after before:k and one more record
    master4 = [(_set(b"before:k"), T0), (_set(b"f:0"), T0), ([b"rename", b"src", b"ghost:k"], T0 + 1)]
    master4 += [(_set(b"after:k"), T0 + 2)]
    positions = _write(m, 4, master4)
    filenum, _, end = positions[1]
    _write(s, 4, master4[2:], pad_to=(filenum, end))


# (db, key): (category planted, layer, diagnosis)
EXPECTED: dict[tuple[int, bytes], tuple[str, str | None, str | None]] = {
    (0, b"a:applied"): ("missing_on_replica", "not_applied", "PIKA_NOT_APPLIED"),
    (0, b"exp:late"): ("missing_on_replica", "not_applied", "PIKA_EXPIRED_IN_TRANSIT"),
    (0, b"lag:k"): ("missing_on_replica", "not_yet_shipped", "PIKA_NOT_YET_SHIPPED"),
    (0, b"ghost:k"): ("missing_on_replica", "not_logged", "PIKA_NOT_LOGGED"),
    (0, LONG): ("missing_on_replica", "not_applied", None),  # matched by prefix only: no diagnosis
    (1, b"gap:x"): ("missing_on_replica", "not_shipped", "PIKA_NOT_SHIPPED"),
    (1, b"w:k"): ("value_mismatch", "not_shipped", "PIKA_NOT_SHIPPED"),  # its earlier write never arrived
    (2, b"ctr"): ("value_mismatch", "replayed", "PIKA_REPLAYED_WRITE"),
    (2, b"own:k"): ("extra_on_replica", "slave_only", "PIKA_SLAVE_ONLY_WRITE"),
    (3, b"old:k"): ("missing_on_replica", "older_than_binlog", "PIKA_BEYOND_BINLOG_HORIZON"),
    (4, b"before:k"): ("missing_on_replica", "before_slave_binlog", "PIKA_BEFORE_SLAVE_BINLOG"),
    (4, b"ghost:k"): ("missing_on_replica", "not_logged", None),  # a RENAME may have written it
    (7, b"nolog"): ("missing_on_replica", None, None),  # no binlog scanned for db7
}


def findings_df(spark, planted: dict[tuple[int, bytes], str]):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    rows = [
        Finding("keyspace", category, db=db, key=key, evidence={"rechecked_rounds": 3}).to_row("run", "p", "pika")
        for (db, key), category in planted.items()
    ]
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA))


@pytest.fixture(scope="module")
def annotated(spark, tmp_path_factory):  # type: ignore[no-untyped-def]
    from audit.sources.pika.layers import annotate_keyspace

    root = tmp_path_factory.mktemp("layers")
    write_pair(root)
    m, s = scan_sides(spark, root)
    found = findings_df(spark, {k: v[0] for k, v in EXPECTED.items()})
    rows = [r.asDict() for r in annotate_keyspace(found, m, s).collect()]
    diagnosed = diagnose("pika", [finding_from_row(r) for r in rows])
    return {(f.db, f.key): f for f in diagnosed}


def test_each_layer_and_its_signature(annotated) -> None:  # type: ignore[no-untyped-def]
    got = {k: (f.category, f.evidence.get("layer"), f.diagnosis) for k, f in annotated.items()}
    assert got == EXPECTED


def test_a_key_older_than_the_binlog_has_no_master_record(annotated) -> None:  # type: ignore[no-untyped-def]
    b = annotated[3, b"old:k"].evidence["binlog"]
    assert b["master"] is None  # the only write was in the purged write2file0
    assert b["replica"]["command"] == "set" and b["replica"]["at"] == "0:0"  # the slave still keeps it
    assert b["horizon"]["master"]["oldest_file"] == 1 and b["horizon"]["master"]["complete"] is False
    assert b["horizon"]["replica"]["complete"] is True


def test_expiry_read_back_from_the_records(annotated) -> None:  # type: ignore[no-untyped-def]
    f = annotated[0, b"exp:late"]
    m, s = f.evidence["binlog"]["master"], f.evidence["binlog"]["replica"]
    assert m["expire_at_ms"] == s["expire_at_ms"] == (T0 + 5) * 1000
    assert (m["ttl_when_logged_ms"], s["ttl_when_logged_ms"]) == (5000, -5000)
    assert f.evidence["replica_delay_s"] == 10 and f.evidence["expired_when_replica_logged"] is True
    assert annotated[0, b"a:applied"].evidence["expired_when_replica_logged"] is None  # a SET sets no expiry


def test_long_keys_are_matched_by_prefix_and_say_so(annotated) -> None:  # type: ignore[no-untyped-def]
    f = annotated[0, LONG]
    assert f.evidence["key_match"] == f.evidence["binlog"]["key_match"] == "prefix"
    assert f.evidence["binlog"]["master"]["command"] == "set"


def test_other_key_writers_are_counted(annotated) -> None:  # type: ignore[no-untyped-def]
    assert annotated[4, b"ghost:k"].evidence["other_key_writers"] == 1
    assert annotated[0, b"ghost:k"].evidence["other_key_writers"] == 0


def test_a_db_without_binlog_keeps_its_finding_unannotated_but_explicit(annotated) -> None:  # type: ignore[no-untyped-def]
    f = annotated[7, b"nolog"]
    assert f.evidence["binlog"] is None and f.evidence["layer"] is None
    assert f.evidence["rechecked_rounds"] == 3


def test_groups_render_one_line_per_layer_and_command(spark, annotated) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa

    from audit.sources.pika.layer_groups import collect_groups, group_by_command

    rows = [f.to_row("run", "p", "pika") for f in annotated.values()]
    df = spark.createDataFrame(pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA))
    groups = collect_groups(group_by_command(df))
    assert len(groups) == 12  # every finding with a layer; none merged across diagnoses or categories
    lines = [g.text for g in groups]
    for line in (
        "1 key written by set is shipped but absent on the slave (missing_on_replica; db0: 1)",
        "1 key written by set was logged on the master but never reached the slave's binlog "
        "(missing_on_replica; db1: 1)",
        "1 key written by set was logged on the master but never reached the slave's binlog (value_mismatch; db1: 1)",
        "1 key written by incr was written more times in the slave's binlog than in the master's "
        "(value_mismatch; db2: 1)",
        "1 key has no record in the master's binlog, which is complete: never logged (missing_on_replica; db0: 1)",
        "1 key written by set was last written before the oldest binlog file the master keeps "
        "(missing_on_replica; db3: 1)",
    ):
        assert line in lines
    by_key = {(g.layer, g.diagnosis): g.sample_keys for g in groups}
    assert by_key["not_applied", "PIKA_NOT_APPLIED"] == ["a:applied"]
    assert by_key["not_applied", None] == ["L" * 1500]


def test_the_binlog_diffs_frontier_gives_the_same_layers(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The frontier found by content agrees with the one the binlog diff's alignment gives."""
    import shutil

    from audit.sources.pika.layers import annotate_keyspace, shipped_frontier

    write_pair(tmp_path)
    for side, db in ((side, db) for side in ("m", "s") for db in (2, 3, 4)):  # the cases where lag matters
        shutil.rmtree(tmp_path / side / f"log_db{db}")
    m, s = scan_sides(spark, tmp_path)
    frontier = shipped_frontier(diff_binlogs(spark, m, s, tmp_path / "work", 2).matched)
    planted = {k: v[0] for k, v in EXPECTED.items() if k[0] in (0, 1)}
    rows = annotate_keyspace(findings_df(spark, planted), m, s, frontier).collect()
    got = {(r["db"], bytes(r["key"])): json.loads(r["detail"])["layer"] for r in rows}
    assert got == {k: EXPECTED[k][1] for k in planted}


def test_healthy_pair_with_writes_in_flight_gives_no_loss(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A healthy slave 40 records behind a master still being written: the binlog diff finds nothing, and
    a key whose last write is among those 40 records is lag, never a loss signature."""
    import pyarrow as pa

    from audit.sources.pika.layer_groups import collect_groups, group_by_command
    from audit.sources.pika.layers import annotate_keyspace
    from audit.sources.pika.range_keys import keys_of_ranges
    from tests.pika_scenarios import commands, healthy_plan, write_master, write_slave

    n = 600
    for db in (0, 1):
        log = write_master(tmp_path / "m", db, commands(n, db), 64 * 1024)
        write_slave(tmp_path / "s", db, log, healthy_plan(0, n - 40 if db == 0 else n, delay_s=1), 64 * 1024)
    m, s = scan_sides(spark, tmp_path)
    diff = diff_binlogs(spark, m, s, tmp_path / "work", 2)
    assert diff.findings.count() == 0
    assert keys_of_ranges(diff.findings, m, s).count() == 0
    # db0:counter is INCRed every 5th record: the slave holds the older INCRs (same content as the last
    # one), the master's last INCR is among the 40 in flight
    planted = {(0, b"db0:counter"): "value_mismatch"}
    rows = [r.asDict() for r in annotate_keyspace(findings_df(spark, planted), m, s).collect()]
    (f,) = diagnose("pika", [finding_from_row(r) for r in rows])
    assert (f.evidence["layer"], f.diagnosis) == ("not_yet_shipped", "PIKA_NOT_YET_SHIPPED")
    empty = annotate_keyspace(findings_df(spark, {}), m, s)
    assert empty.count() == 0 and collect_groups(group_by_command(empty)) == []
    other = Finding("replication", "link_down", db=0, evidence={"link": "down"}).to_row("run", "p", "pika")
    df = spark.createDataFrame(pa.Table.from_pylist([other], schema=FINDINGS_SCHEMA))
    assert [r.asDict() for r in annotate_keyspace(df, m, s).collect()] == [other]  # not a keyspace finding: as is
    replica = json.loads(rows[0]["detail"])["binlog"]["replica"]
    assert replica["command"] == "incr"  # an older INCR of it was shipped
