"""Pika audits end to end: binlog pairs written byte-exactly with each Pika incident of docs/incidents.md planted,
healthy pairs (full-sync padding, preallocated zero tails, lag) that must give no finding, damaged files,
and the keyspace + INFO checks through Pika faces over real redis-servers."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.pika_scenarios import (
    commands,
    double_trysync_plan,
    gap_plan,
    healthy_plan,
    resume_offset_plan,
    write_master,
    write_slave,
)

pytestmark = pytest.mark.integration
FILE_SIZE = 256 * 1024  # small files, so the logs roll over and ranges cross file boundaries


def files_only(name: str, root: Path, dbs: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "pika",
        "dbs": dbs,
        "binlog": {"master_dir": str(root / "m"), "replica_dir": str(root / "s"), "file_size": FILE_SIZE},
        **extra,
    }


def audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pair: dict[str, Any]) -> tuple[int, Path]:
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


def by_category(root: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in findings(root):
        out.setdefault(f["category"], []).append(f)
    return out


def test_healthy_multi_db_pair_with_padding_zero_tails_and_lag(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 3000
    for db in (0, 1, 2):
        m = write_master(tmp_path / "m", db, commands(n, db), FILE_SIZE)
        # db1 was full-synced mid-way (padding up to the sync point); db2 lags 40 records behind
        first = 1234 if db == 1 else 0
        last = n - 40 if db == 2 else n
        write_slave(tmp_path / "s", db, m, healthy_plan(first, last, delay_s=1), FILE_SIZE, full_sync_before=first)
    code, root = audit(tmp_path, monkeypatch, files_only("healthy", tmp_path, [0, 1, 2]))
    assert findings(root) == []
    assert code == 0
    s = summary(root)["pairs"][0]
    assert s["status"] == "passed"
    assert s["coverage"]["master_binlog_records"] == 9000 and s["coverage"]["binlog_unreplicated_records"] == 40
    # what was compared, in the summary table's words: the master's records up to the slave's last one
    assert s["compared"] == ["8,960 binlog records compared"]
    checks = s["checks"]
    assert checks["binlog"]["status"] == "done"
    assert re.fullmatch(r"dbs \[0, 1, 2\], \d+\+\d+ files", checks["binlog"]["reason"]), checks["binlog"]["reason"]
    assert checks["keyspace"]["status"] == "skipped" and "files-only" in checks["keyspace"]["reason"]
    metrics = json.loads((root / "work" / "healthy" / "state.json").read_text())["metrics"]
    assert metrics["binlog_unreplicated_records"] == 40
    assert metrics["binlog_records_shifted"] == 0
    from audit.history import open_history  # every finished run lands in the history (default: OUT/history.sqlite)

    with open_history(None, out=tmp_path / "out") as store:
        assert [r["run_id"] for r in store.runs()] == [root.name]


def test_gap_in_one_db_after_a_timeout_across_a_file_boundary(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 4000
    logs = {}
    for db in (0, 1, 2):
        logs[db] = write_master(tmp_path / "m", db, commands(n, db), FILE_SIZE)
    # find a gap in db1 that starts in one file and ends in the next
    m1 = logs[1]
    # (a SET: were it an INCR, "the gap starts one record later" would fit the logs just as well)
    start = next(i for i in range(1000, n) if m1.positions[i][0] != m1.positions[i + 300][0] and i % 5 == 0)
    gap = 300
    for db in (0, 1, 2):
        plan = gap_plan(n, start, gap) if db == 1 else healthy_plan(0, n)
        write_slave(tmp_path / "s", db, logs[db], plan, FILE_SIZE)
    code, root = audit(tmp_path, monkeypatch, files_only("gap", tmp_path, [0, 1, 2]))
    assert code == 1
    found = by_category(root)
    missing = found.pop("missing_range")
    assert len(missing) == 1, missing
    f = missing[0]
    assert f["db"] == 1 and f["count"] == gap
    assert f["start"] == m1.where(start) and f["end"] == m1.where(start + gap - 1, end=True)
    assert f["start"].split(":")[0] != f["end"].split(":")[0]  # 49 -> 50 style: the range crosses files
    assert f["bytes"] == sum(m1.size(i) for i in range(start, start + gap))
    assert f["start_num"] == m1.positions[start][0] << 32 | m1.positions[start][1]
    assert f["diagnosis"] == "PIKA_QUEUE_ERASE_GAP"
    # Pika's own lag arithmetic (filenum x binlog-file-size + offset): exact but for the file's overrun
    assert abs(json.loads(f["detail"])["slave_behind_bytes"] - f["bytes"]) < 1024
    assert found == {}  # nothing else: the later records, shifted, are matched by content
    s = summary(root)["pairs"][0]
    assert "PIKA_QUEUE_ERASE_GAP" in json.dumps(s["diagnoses"])


def test_a_gap_and_a_later_replay_of_alike_records_are_one_finding_each(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # `incr db0:counter` is every fifth record, so the lost records and the replayed ones share content.
    # Pairing them with each other by content alone, thousands of records apart, once hid one lost and one
    # replayed record per pair and cut both findings into pieces.
    n = 6000
    m = write_master(tmp_path / "m", 0, commands(n, 0), FILE_SIZE)
    plan = gap_plan(n, 1000, 300)
    at = next(k for k, (i, _) in enumerate(plan) if i == 4000)
    plan = plan[:at] + plan[at - 200 : at] + plan[at:]  # records 3800-3999 written twice
    write_slave(tmp_path / "s", 0, m, plan, FILE_SIZE)
    code, root = audit(tmp_path, monkeypatch, files_only("gap-replay", tmp_path, [0]))
    assert code == 1
    found = by_category(root)
    (gap,) = found.pop("missing_range")
    (replay,) = found.pop("duplicate_range")
    assert (gap["count"], gap["start"], gap["end"]) == (300, m.where(1000), m.where(1299, end=True))
    assert replay["count"] == 200
    assert found == {}


def test_single_db_gap_is_found_but_not_blamed_on_the_multi_db_bug(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 1500
    m = write_master(tmp_path / "m", 0, commands(n, 0), FILE_SIZE)
    write_slave(tmp_path / "s", 0, m, gap_plan(n, 700, 5), FILE_SIZE)
    _, root = audit(tmp_path, monkeypatch, files_only("gap1", tmp_path, [0]))
    (f,) = by_category(root)["missing_range"]
    assert (f["count"], f["diagnosis"]) == (5, None)


@pytest.mark.parametrize(("gap_start", "gap"), [(710, 5), (700, 1)])
def test_a_gap_inside_a_run_of_identical_records_has_its_size_and_a_place_in_the_run(
    gap_start, gap, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # The documented limit (docs/formats/pika-binlog.md, "Known limit"): 40 identical `incr` records
    # (700-739) cannot tell which copies went missing. The count is exact and the finding lies in the run,
    # at or after the lost records; its bytes are those of the records where it lies (the lost bytes but
    # for block framing: a fragment header, a block's end padding).
    n = 1500
    cmds = commands(n, 0)
    cmds[700:740] = [[b"incr", b"db0:counter"]] * 40
    m = write_master(tmp_path / "m", 0, cmds, FILE_SIZE)
    write_slave(tmp_path / "s", 0, m, gap_plan(n, gap_start, gap), FILE_SIZE)
    _, root = audit(tmp_path, monkeypatch, files_only("run", tmp_path, [0]))
    found = by_category(root)
    (f,) = found.pop("missing_range")
    starts = {m.where(i): i for i in range(700, 740)}
    assert f["count"] == gap and f["start"] in starts, f
    placed = starts[f["start"]]
    assert gap_start <= placed <= 740 - gap
    assert f["end"] == m.where(placed + gap - 1, end=True)
    assert f["bytes"] == sum(m.size(i) for i in range(placed, placed + gap))
    lost = sum(m.size(i) for i in range(gap_start, gap_start + gap))
    assert abs(f["bytes"] - lost) <= 15 * gap, (f["bytes"], lost)  # block framing only
    assert found == {}


def test_batch_replayed_twice_after_a_double_trysync(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 2000
    m = write_master(tmp_path / "m", 0, commands(n, 0), FILE_SIZE)
    write_slave(tmp_path / "s", 0, m, double_trysync_plan(n, resume=900, batch=50), FILE_SIZE)
    code, root = audit(tmp_path, monkeypatch, files_only("twice", tmp_path, [0]))
    assert code == 1
    found = by_category(root)
    (dup,) = found.pop("duplicate_range")
    assert dup["count"] == 50 and dup["diagnosis"] == "PIKA_DOUBLE_TRYSYNC"
    assert dup["bytes"] == sum(m.size(i) for i in range(900, 950))
    # in the slave's coordinates: the second copy starts where the master's record 950 starts
    assert dup["start"] == m.where(950)
    (ahead,) = found.pop("replica_ahead")
    assert ahead["bytes"] == dup["bytes"] and ahead["db"] == 0
    assert found == {}


def test_last_batch_of_a_session_sent_again(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 2000
    m = write_master(tmp_path / "m", 0, commands(n, 0), FILE_SIZE)
    write_slave(tmp_path / "s", 0, m, resume_offset_plan(n, session_end=1200, batch=20), FILE_SIZE)
    _, root = audit(tmp_path, monkeypatch, files_only("resume", tmp_path, [0]))
    found = by_category(root)
    (dup,) = found.pop("duplicate_range")
    assert (dup["count"], dup["diagnosis"]) == (20, "PIKA_RESUME_OFFSET")
    assert set(found) == {"replica_ahead"}


def test_100k_missing_records_in_a_row_are_one_finding(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 120_000
    m = write_master(tmp_path / "m", 0, commands(n, 0, value_size=8), 8 << 20)
    write_slave(tmp_path / "s", 0, m, gap_plan(n, 10_000, 100_000), 8 << 20)
    pair = files_only("big", tmp_path, [0])
    pair["binlog"]["file_size"] = 8 << 20
    _, root = audit(tmp_path, monkeypatch, pair)
    (f,) = by_category(root)["missing_range"]
    assert f["count"] == 100_000 and f["start"] == m.where(10_000)


def test_divergent_entry_at_the_same_position(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 500
    cmds = commands(n, 0)
    m = write_master(tmp_path / "m", 0, cmds, FILE_SIZE)
    altered = [list(c) for c in cmds]
    altered[321] = [b"set", cmds[321][1], cmds[321][2][:-1] + b"Y"]  # same length, other value
    if cmds[321][0] != b"set":
        altered[321] = [cmds[321][0], *[a[:-1] + b"Y" for a in cmds[321][1:]]]
    slave = write_master(tmp_path / "s", 0, altered, FILE_SIZE)
    assert slave.positions == m.positions
    _, root = audit(tmp_path, monkeypatch, files_only("div", tmp_path, [0]))
    found = by_category(root)
    (f,) = found.pop("divergent_entry")
    assert f["start"] == m.where(321) and f["master_digest"] != f["replica_digest"]
    assert found == {}


def _block_header_at(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset : offset + 8] = struct.pack("<I", 70000)[:3] + b"\0\0\0\0" + b"\x01"  # length > 65528
    path.write_bytes(bytes(data))


def test_damaged_slave_file_is_a_finding_and_the_rest_is_still_audited(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    n = 3000
    m = write_master(tmp_path / "m", 0, commands(n, 0), FILE_SIZE)
    write_slave(tmp_path / "s", 0, m, gap_plan(n, 2500, 10), FILE_SIZE)
    victim = 400
    f0, start, _ = m.positions[victim]
    _block_header_at(tmp_path / "s" / "log_db0" / f"write2file{f0}", start)
    # and the master's log was cut mid-record by a crash: a torn tail, not an error
    last = tmp_path / "m" / "log_db0" / f"write2file{m.positions[-1][0]}"
    last.write_bytes(last.read_bytes()[: m.positions[-1][1] + 20])
    code, root = audit(tmp_path, monkeypatch, files_only("dmg", tmp_path, [0]))
    found = by_category(root)
    (bad,) = found.pop("corrupt_record")
    assert bad["start"] == f"{f0}:{start}" and json.loads(bad["detail"])["side"] == "replica"
    assert "65528" in json.loads(bad["detail"])["reason"] or "length" in json.loads(bad["detail"])["reason"]
    (torn,) = found.pop("torn_tail")
    assert torn["start"] == m.where(n - 1)
    gap = [f for f in found.pop("missing_range") if f["count"] == 10]
    assert len(gap) == 1 and gap[0]["start"] == m.where(2500)  # records after the damage still compared
    assert code == 1


def test_bad_binlog_settings_are_clear_errors(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    pair = {"name": "p", "kind": "pika", "binlog": {"master_dir": str(tmp_path)}}
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    assert "binlog" in capsys.readouterr().err
    pair = files_only("p", tmp_path / "nowhere", [0])
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
    assert "nowhere" in capsys.readouterr().err


def test_servers_keyspace_in_every_db_and_info_crosscheck(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Pika faces over a real redis master/replica: the keyspace is audited db by db with only commands
    Pika has (no DUMP; PTTL of a missing key is 0), and INFO's per-DB binlog_offset meets the manifest."""
    from audit.local.redis_server import wait_in_sync
    from audit.local.sample import load_sample, plant_divergences
    from tests.pika_front import start_pika_pair

    master, replica = fresh_pair
    for db in (0, 1, 2):
        load_sample(master.client(db), n_keys=400, big_hash_fields=50, seed=db)
    wait_in_sync(master, replica)
    planted = plant_divergences(replica.client(2), db=2)
    n = 800
    for db in (0, 1, 2):
        m = write_master(tmp_path / "m", db, commands(n, db), FILE_SIZE)
        write_slave(tmp_path / "s", db, m, healthy_plan(0, n), FILE_SIZE)
    fm, fs = start_pika_pair(master.port, replica.port, [0, 1, 2], tmp_path / "m", tmp_path / "s")
    try:
        pair = {**files_only("both", tmp_path, [0, 1, 2]), "master": fm.url, "replica": fs.url}
        code, root = audit(tmp_path, monkeypatch, pair)
    finally:
        fm.stop()
        fs.stop()
    got = {(f["category"], f["db"], f["key"]) for f in findings(root)}
    assert got == {(p.category, 2, p.key) for p in planted}
    assert code == 1
    state = json.loads((root / "work" / "both" / "state.json").read_text())
    assert state["servers"]["master"]["version"] == "4.0.0"
    assert {c: v["status"] for c, v in state["checks"].items()} == {
        "keyspace": "done",
        "binlog": "done",
        "replication": "done",
    }
    cross = state["check_data"]["binlog"]["crosscheck"]
    assert all(v["equal"] for side in cross.values() for v in side.values())
    assert state["metrics"]["keys_compared"] >= 1200


def test_slave_that_follows_another_master_is_not_diffed(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tests.pika_front import PikaFront, master_info, slave_info

    master, replica = fresh_pair
    fm = PikaFront(master.port, master_info(None, [0], 1)).start()
    fs = PikaFront(replica.port, slave_info(None, [0], 1)).start()  # follows port 1, not fm
    try:
        code, root = audit(
            tmp_path, monkeypatch, {"name": "wm", "kind": "pika", "dbs": [0], "master": fm.url, "replica": fs.url}
        )
    finally:
        fm.stop()
        fs.stop()
    assert [f["category"] for f in findings(root)] == ["wrong_master"] and code == 1


def test_logs_growing_during_the_audit_give_no_false_positive(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A live pair: the master keeps appending and the slave follows a few records behind, in 3 DBs,
    rolling over files, while the audit reads both sides."""
    import threading
    import time

    from audit.local.pika_binlog import BinlogWriter

    dbs, n = (0, 1, 2), 8000
    cmds = {db: commands(n, db) for db in dbs}
    writers = {
        (side, db): BinlogWriter(tmp_path / side / f"log_db{db}", file_size=FILE_SIZE)
        for side in ("m", "s")
        for db in dbs
    }
    for db in dbs:
        for i in range(1500):
            writers["m", db].append(cmds[db][i], exec_time=1_700_000_000 + i)
            writers["s", db].append(cmds[db][i], exec_time=1_700_000_000 + i)
    stop = threading.Event()
    written = {"n": 1500}

    def live() -> None:
        i = 1500
        while not stop.is_set() and i < n:
            for db in dbs:
                writers["m", db].append(cmds[db][i], exec_time=1_700_000_000 + i)
                if i >= 1507:
                    writers["s", db].append(cmds[db][i - 7], exec_time=1_700_000_000 + i)
            i += 1
            written["n"] = i
            time.sleep(0.0005)

    t = threading.Thread(target=live, daemon=True)
    t.start()
    try:
        code, root = audit(tmp_path, monkeypatch, files_only("live", tmp_path, list(dbs)))
    finally:
        stop.set()
        t.join()
    assert written["n"] > 2000  # the logs really grew while being read
    assert findings(root) == [] and code == 0


@pytest.mark.parametrize("layout", ["empty", "pika root", "empty log_db0"])
def test_a_binlog_directory_without_binlogs_is_a_source_error_not_a_clean_audit(
    layout, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # it once read as 0 files, 0 records and a passed gate
    for side in ("m", "s"):
        root = tmp_path / side
        if layout == "pika root":
            (root / "log" / "log_db0").mkdir(parents=True)  # the log is one level further down
            (root / "db").mkdir()
        elif layout == "empty log_db0":
            (root / "log_db0").mkdir(parents=True)
        else:
            root.mkdir()
    code, root = audit(tmp_path, monkeypatch, {**files_only("nobinlog", tmp_path, [0]), "dbs": None})
    assert code == 3
    err = " ".join(capsys.readouterr().err.split())
    assert str(tmp_path / "s") in err and ("log_db<N>" in err or "write2file<N>" in err)  # the slave is read first


def test_pika_pointed_at_servers_without_binlog_offsets_is_not_covered(redis_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a Redis pair audited as pika: INFO replication has no binlog_offset, so no replication state was read
    master, replica = redis_pair
    pair = {"name": "notpika", "kind": "pika", "master": master.url, "replica": replica.url, "dbs": [0]}
    code, root = audit(tmp_path, monkeypatch, pair)
    s = summary(root)["pairs"][0]
    assert code == 1 and s["status"] == "failed"
    assert any("replication state could not be read" in line for line in s["not_covered"]), s["not_covered"]


def test_a_keyspace_audit_without_dbs_says_it_read_db_0_only(redis_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # without `dbs` a Pika pair (and a Pika verification, which the docs said read "every db either side
    # has keys in") compared db 0 alone, and the summary did not say so
    master, replica = redis_pair
    pair = {"name": "nodbs", "kind": "pika", "master": master.url, "replica": replica.url, "check_replication": False}
    _, root = audit(tmp_path, monkeypatch, pair)
    s = summary(root)["pairs"][0]
    assert s["dbs"] == [0]
    assert any(line.startswith("db 0 only:") and "set dbs" in line for line in s["limits"]), s["limits"]
