"""The Spark commit-log diff on small generated master/slave stores (one local session for the whole run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from audit.diagnose import diagnose
from audit.findings import FINDING_COLUMNS, FINDINGS_SCHEMA, Finding
from audit.local.rocketmq_commitlog import Message, encoded_length, replicate, write_store
from audit.sources.rocketmq.diff import StoreDiff, diff_stores
from audit.sources.rocketmq.ha import ha_findings, parse_broker_log
from audit.sources.rocketmq.scan import scan_commitlog
from audit.sources.rocketmq.spark_store import Keep, coalesce_ranges, read_store
from audit.sources.rocketmq.store import commitlog_files, list_store, max_offset
from tests.unit.test_rmq_ha import proposed

FILE_SIZE = 16 * 1024
CHUNK = 4096
T_OLD, T_NEW = 1_600_000_000_000, 1_700_000_000_000


def msg(i: int, *, host: str = "10.0.0.1:10911", t0: int = T_NEW, tag: str = "new") -> Message:
    """Messages of one fixed size, so two masters' logs have records at the same offsets."""
    return Message(
        topic="TopicTest",
        body=f"{tag} order {i:08d} paid".encode(),
        properties={"UNIQ_KEY": f"{tag.upper()}0000000000{i:016X}", "KEYS": f"order-{i:06d}", "TAGS": "TagA"},
        queue_id=i % 4,
        queue_offset=i // 4,
        born_ts=t0 + 10 * i,
        born_host="10.0.0.7:50123",
        store_ts=t0 + 10 * i + 1,
        store_host=host,
    )


SIZE = encoded_length(msg(0))


def run(spark: Any, master: Path, replica: Path) -> tuple[list[dict[str, Any]], StoreDiff]:
    result = diff_stores(spark, commitlog_files(master), commitlog_files(replica), chunk_bytes=CHUNK)
    rows = sorted((r.asDict() for r in result.findings.collect()), key=lambda r: (r["category"], r["start_num"]))
    result.release()
    return rows, result


def as_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    return [
        Finding(
            r["check"],
            r["category"],
            start_num=r["start_num"],
            end_num=r["end_num"],
            count=r["count"],
            bytes=r["bytes"],
            evidence=json.loads(r["detail"]),
        )
        for r in rows
    ]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    root = tmp_path_factory.mktemp("healthy")
    offsets = write_store(root / "master", [msg(i) for i in range(300)], file_size=FILE_SIZE)
    return root, offsets


def test_healthy_pair_has_no_findings_and_a_foreign_client_only_shows_in_the_log(
    spark: Any, healthy: tuple[Path, list[int]]
) -> None:
    root, offsets = healthy
    # An empty slave starts at the master's last file at attach time: here, the second file.
    replicate(root / "master", root / "slave", start=FILE_SIZE, upto=max_offset(root / "master") or 0)
    rows, result = run(spark, root / "master", root / "slave")
    assert rows == []
    m = result.metrics
    assert (m["common_start"], m["common_end"]) == (FILE_SIZE, m["master_max_offset"])
    assert m["master_max_offset"] == m["replica_max_offset"] == offsets[-1] + SIZE
    assert m["chunks_different"] == 0 and m["chunks_equal"] == m["chunks_compared"] > 0
    assert m["bytes_compared"] == m["common_bytes"] == m["bytes_equal_by_hash"]
    assert m["master_records"] == 300 and m["replica_records"] == len([o for o in offsets if o >= FILE_SIZE])
    assert m["master_records_compared"] == 0 and m["bytes_not_compared"] == 0
    # Someone sent "999999999" to the master's HA port (docs/incidents.md, RMQ_FOREIGN_HA_CLIENT): the data
    # stays clean, the log does not.
    log = parse_broker_log(
        [
            "2019-12-04 11:35:16 INFO ReadSocketService - slave[/127.0.0.2:38824] request offset 4123389851770370361",
            f"2019-12-04 11:35:53 INFO BrokerControllerScheduledThread1 - Slave fall behind master: "
            f"{m['master_max_offset'] - 4123389851770370361} bytes",
        ]
    )
    (lag,) = ha_findings(master_max=m["master_max_offset"], replica_max=m["replica_max_offset"], log=log)
    assert lag.category == "negative_lag" and lag.evidence["ack_ascii"] == "99999999"
    assert lag.evidence["replica_ahead"] is False and lag.evidence["client"] == "/127.0.0.2:38824"
    assert [f.diagnosis for f in diagnose("rocketmq", [lag], proposed())] == ["RMQ_FOREIGN_HA_CLIENT"]


def test_slave_cut_mid_record_is_only_a_torn_tail(spark: Any, healthy: tuple[Path, list[int]]) -> None:
    root, offsets = healthy
    cut = offsets[250] + 37  # an HA chunk boundary inside record 250
    replicate(root / "master", root / "cut", start=0, upto=cut)
    rows, result = run(spark, root / "master", root / "cut")
    assert [(r["category"], r["start_num"], r["severity"]) for r in rows] == [("torn_tail", offsets[250], "info")]
    assert json.loads(rows[0]["detail"])["side"] == "replica"
    assert result.metrics["replica_max_offset"] == offsets[250] and result.metrics["chunks_different"] >= 1
    assert result.metrics["master_records_compared"] > 0  # the chunk holding the cut was compared record by record


@pytest.mark.parametrize("new_host", ["10.0.0.9:10911", "10.0.0.1:10911"], ids=["new-machine", "same-machine"])
def test_stale_slave_reattached_to_a_redeployed_master(spark: Any, tmp_path: Path, new_host: str) -> None:
    # The old master wrote 120 records; its slave copied them all. The master is redeployed empty under
    # the same brokerName and has written 70 records so far; the slave reattached and reports its old
    # max offset, so the new master sends it nothing until it catches up (docs/incidents.md, RMQ_STALE_SLAVE).
    old = write_store(
        tmp_path / "old", [msg(i, host="10.0.0.1:10911", t0=T_OLD, tag="old") for i in range(120)], file_size=FILE_SIZE
    )
    replicate(tmp_path / "old", tmp_path / "slave", start=0, upto=old[-1] + SIZE)
    new = write_store(tmp_path / "new", [msg(i, host=new_host) for i in range(70)], file_size=FILE_SIZE)
    master_max = new[-1] + SIZE
    rows, result = run(spark, tmp_path / "new", tmp_path / "slave")
    got = {r["category"]: r for r in rows}
    assert sorted(got) == ["missing_range", "stale_replica_data"]
    stale, missing = got["stale_replica_data"], got["missing_range"]
    assert (stale["start_num"], stale["end_num"], stale["count"]) == (0, master_max, 70)
    assert (missing["start_num"], missing["end_num"], missing["count"]) == (0, master_max, 70)
    assert stale["bytes"] == missing["bytes"] == sum(SIZE for _ in range(70))
    ev = json.loads(stale["detail"])
    assert ev["other_master"] and ev["older_than_master"] and ev["store_ts_max"] < T_NEW
    assert ev["foreign_store_host"] is (new_host != "10.0.0.1:10911")
    assert stale["replica_digest"] and stale["master_digest"] and stale["replica_digest"] != stale["master_digest"]
    m = result.metrics
    assert (m["master_max_offset"], m["replica_max_offset"]) == (master_max, old[-1] + SIZE)
    log = parse_broker_log(
        [
            "2024-05-01 10:00:00 INFO ReadSocketService - slave[/10.0.0.2:41000] request offset "
            f"{m['replica_max_offset']}",
            f"2024-05-01 10:01:00 INFO BrokerControllerScheduledThread1 - Slave fall behind master: "
            f"{m['master_max_offset'] - m['replica_max_offset']} bytes",
        ]
    )
    ha = ha_findings(master_max=m["master_max_offset"], replica_max=m["replica_max_offset"], log=log)
    assert [f.category for f in ha] == ["replica_ahead", "negative_lag"]
    assert ha[0].bytes == m["replica_max_offset"] - m["master_max_offset"]
    diagnosed = diagnose("rocketmq", ha + as_findings(rows), proposed())
    assert {(f.category, f.diagnosis) for f in diagnosed} == {
        ("replica_ahead", "RMQ_STALE_SLAVE"),
        ("negative_lag", "RMQ_STALE_SLAVE"),
        ("stale_replica_data", "RMQ_STALE_SLAVE"),
        ("missing_range", None),
    }


def test_missing_span_is_one_range_in_master_offsets(spark: Any, tmp_path: Path) -> None:
    messages = [msg(i) for i in range(200)]
    offsets = write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    first_in_file_1 = next(i for i, o in enumerate(offsets) if o >= FILE_SIZE)
    gone = range(first_in_file_1 - 2, first_in_file_1 + 2)
    write_store(tmp_path / "s", [m for i, m in enumerate(messages) if i not in gone], file_size=FILE_SIZE)
    rows, _ = run(spark, tmp_path / "m", tmp_path / "s")
    # One finding although a BLANK and a file boundary lie inside; bytes count the records only.
    assert [(r["category"], r["start_num"], r["end_num"], r["count"], r["bytes"]) for r in rows] == [
        ("missing_range", offsets[gone[0]], offsets[gone[-1]] + SIZE, 4, 4 * SIZE)
    ]
    ev = json.loads(rows[0]["detail"])
    assert (ev["first_uniq_key"], ev["last_uniq_key"]) == (
        messages[gone[0]].properties["UNIQ_KEY"],
        messages[gone[-1]].properties["UNIQ_KEY"],
    )
    assert rows[0]["master_digest"] and rows[0]["replica_digest"]  # the slave holds other records there


def test_duplicated_message_is_a_duplicate_range_in_slave_offsets(spark: Any, tmp_path: Path) -> None:
    messages = [msg(i) for i in range(200)]
    write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    dup = 120  # the slave stored message 120 twice in a row (a producer retry it alone accepted)
    s_offsets = write_store(
        tmp_path / "s", [*messages[: dup + 1], messages[dup], *messages[dup + 1 :]], file_size=FILE_SIZE
    )
    rows, result = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"], r["end_num"], r["count"], r["bytes"]) for r in rows] == [
        ("duplicate_range", s_offsets[dup + 1], s_offsets[dup + 1] + SIZE, 1, SIZE)
    ]
    ev = json.loads(rows[0]["detail"])
    assert ev["first_uniq_key"] == messages[dup].properties["UNIQ_KEY"]
    assert ev["first_original_offset"] == s_offsets[dup]
    assert result.metrics["replica_max_offset"] > result.metrics["master_max_offset"]
    assert result.metrics["duplicate_lookup"] == "whole master log"


def test_damaged_slave_record_is_reported_and_the_next_file_still_compared(spark: Any, tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "m", [msg(i) for i in range(200)], file_size=FILE_SIZE)
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=offsets[-1] + SIZE)
    target = offsets[10]
    path = tmp_path / "s" / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[target + 95] ^= 0x01  # one bit of the body
    path.write_bytes(bytes(data))
    rows, result = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"], r["end_num"]) for r in rows] == [("corrupt_record", target, target + SIZE)]
    ev = json.loads(rows[0]["detail"])
    assert (ev["side"], ev["reason"], ev["file"], ev["position"]) == ("replica", "body_crc", "0" * 20, target)
    m = result.metrics
    assert m["bytes_not_compared"] == FILE_SIZE - target and m["replica_damaged_records"] == 1
    assert m["bytes_compared"] == m["common_bytes"] - m["bytes_not_compared"]


def test_read_store_gives_every_row_of_the_fixture_and_an_end_row(spark: Any, tmp_path: Path) -> None:
    from tests.unit.test_rmq_commitlog import FIXTURE

    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / FIXTURE.name).write_bytes(FIXTURE.read_bytes())
    rows = read_store(spark, commitlog_files(tmp_path)).collect()
    kinds = [r.row_kind for r in rows]
    assert kinds.count("record") == 47 and kinds.count("blank") == 1 and kinds.count("end") == 1
    end = next(r for r in rows if r.row_kind == "end")
    assert (end.phys_offset, end.size, json.loads(end.detail)["records"]) == (8192, 8192, 47)
    local = scan_commitlog(FIXTURE.read_bytes(), file_start=0).to_pylist()
    spark_rows = [
        {k: v for k, v in r.asDict().items() if k not in ("file_start", "in_ranges")}
        for r in rows
        if r.row_kind != "end"
    ]
    assert spark_rows == local
    kept = read_store(spark, commitlog_files(tmp_path), keep=Keep(((172 * 3, 172 * 5),))).collect()
    assert [r.phys_offset for r in kept if r.row_kind == "record"] == [516, 688]


def test_coalesce_ranges_and_the_findings_schema(spark: Any) -> None:
    assert coalesce_ranges([(5, 9), (0, 5), (20, 30), (25, 26)]) == ((0, 9), (20, 30))
    empty = spark.createDataFrame(pa.Table.from_pylist([], schema=FINDINGS_SCHEMA))
    assert tuple(empty.columns) == FINDING_COLUMNS


def _store_pair(root: Path, n: int = 320) -> tuple[Path, Path]:
    """A master and a slave holding the same records in non-preallocated files (the last one short)."""
    offsets = write_store(root / "m", [msg(i) for i in range(n)], file_size=FILE_SIZE, preallocate=False)
    replicate(root / "m", root / "s", start=0, upto=offsets[-1] + SIZE, preallocate=False)
    assert len(commitlog_files(root / "m")) >= 4
    return root / "m", root / "s"


def _damage_middle(store: Path, how: str) -> str:
    """Damage the second file of a store the way an operator or a disk would; returns its name."""
    path = commitlog_files(store)[2].path
    path.unlink()
    if how == "symlink loop":
        path.symlink_to(path.name)
    elif how == "empty":
        path.touch()
    return path.name


def _run_listed(spark: Any, master: Path, replica: Path) -> tuple[list[dict[str, Any]], StoreDiff]:
    sides = {"master": list_store(master), "replica": list_store(replica)}
    unlisted = {side: [(u.name, u.problem) for u in listing.unlisted] for side, listing in sides.items()}
    result = diff_stores(spark, sides["master"].files, sides["replica"].files, chunk_bytes=CHUNK, unlisted=unlisted)
    rows = sorted((r.asDict() for r in result.findings.collect()), key=lambda r: (r["category"], r["start_num"]))
    result.release()
    return rows, result


@pytest.mark.parametrize(
    ("how", "reason"),
    [("deleted", "missing_file"), ("symlink loop", "unreadable_file"), ("empty", "empty_file")],
)
def test_a_middle_file_gone_on_both_sides_is_damage_not_a_clean_pass(
    spark: Any, tmp_path: Path, how: str, reason: str
) -> None:
    master, replica = _store_pair(tmp_path)
    name = _damage_middle(master, how)
    assert _damage_middle(replica, how) == name
    rows, result = _run_listed(spark, master, replica)
    start = int(name)
    assert [(r["category"], r["start_num"], r["end_num"], r["bytes"]) for r in rows] == [
        ("corrupt_record", start, start + FILE_SIZE, FILE_SIZE)
    ] * 2
    details = [json.loads(r["detail"]) for r in rows]
    assert sorted(d["side"] for d in details) == ["master", "replica"]
    assert {(d["reason"], d["file"]) for d in details} == {(reason, name)}
    m = result.metrics
    # The hole is not compared, and counted once although both sides lack it.
    assert m["bytes_not_compared"] == FILE_SIZE
    assert m["bytes_compared"] == m["common_bytes"] - FILE_SIZE == m["master_bytes"]


def test_a_master_missing_a_file_the_slave_has_names_the_masters_file(spark: Any, tmp_path: Path) -> None:
    master, replica = _store_pair(tmp_path)
    name = _damage_middle(master, "deleted")
    rows, result = _run_listed(spark, master, replica)
    (row,) = rows  # not a divergent_entry: the slave's records there have nothing to be compared with
    ev = json.loads(row["detail"])
    assert (row["category"], ev["side"], ev["reason"], ev["file"]) == ("corrupt_record", "master", "missing_file", name)
    assert ev["missing_files"] == [name] and ev["previous_file"] < name < ev["next_file"]
    assert result.metrics["bytes_not_compared"] == FILE_SIZE and result.metrics["replica_records_compared"] == 0
