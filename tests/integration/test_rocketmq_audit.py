"""RocketMQ audits end to end through the CLI: the real broker-written commit log in tests/fixtures,
a slave cut mid-record (healthy), a stale slave reattached to a redeployed master (docs/incidents.md,
RMQ_STALE_SLAVE), and a foreign client's 8 bytes on the HA port (docs/incidents.md, RMQ_FOREIGN_HA_CLIENT)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from audit.local.rocketmq_commitlog import replicate, write_store
from audit.sources.rocketmq.store import max_offset
from tests.conftest import FIXTURES
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.unit.test_rmq_diff import msg

pytestmark = pytest.mark.integration
FIXTURE = FIXTURES / "rocketmq" / "00000000000000000000"
FILE_SIZE = 16 * 1024


def audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master: dict[str, Any], replica: dict[str, Any], **gate: Any
) -> tuple[int, Path]:
    pair = {"name": "mq", "kind": "rocketmq", "master": master, "replica": replica, **({"gate": gate} if gate else {})}
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


def test_real_broker_log_with_a_slave_cut_mid_record(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "m" / "commitlog").mkdir(parents=True)
    (tmp_path / "s" / "commitlog").mkdir(parents=True)
    shutil.copy(FIXTURE, tmp_path / "m" / "commitlog" / FIXTURE.name)
    data = FIXTURE.read_bytes()
    (tmp_path / "s" / "commitlog" / FIXTURE.name).write_bytes(data[:5000] + bytes(len(data) - 5000))
    code, root = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")})
    got = findings(root)
    assert [f["category"] for f in got] == ["torn_tail"]  # an HA chunk boundary, nothing else
    assert got[0]["start_num"] < 5000 <= got[0]["end_num"] or got[0]["start_num"] <= 5000
    assert code == 0
    s = summary(root)["pairs"][0]
    assert s["status"] == "passed"
    assert s["coverage"]["master_records"] == 47 and s["coverage"]["bytes_not_compared"] == 0


def test_stale_slave_reattached_to_a_redeployed_master(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    write_store(
        tmp_path / "old",
        [msg(i, host="10.0.0.1:10911", t0=1_600_000_000_000, tag="old") for i in range(300)],
        file_size=FILE_SIZE,
    )
    replicate(tmp_path / "old", tmp_path / "s", start=0, upto=max_offset(tmp_path / "old") or 0)
    write_store(
        tmp_path / "m",
        [msg(i, host="10.0.0.2:10911", t0=1_700_000_000_000, tag="new") for i in range(120)],
        file_size=FILE_SIZE,
    )
    code, root = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")})
    cats = {f["category"]: f for f in findings(root)}
    assert {"stale_replica_data", "replica_ahead"} <= set(cats)
    assert cats["stale_replica_data"]["diagnosis"] == "RMQ_STALE_SLAVE"
    assert cats["replica_ahead"]["diagnosis"] == "RMQ_STALE_SLAVE"
    assert code == 1


def test_foreign_client_on_the_ha_port_explains_the_negative_lag(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    write_store(
        tmp_path / "m",
        [msg(i, host="10.0.0.2:10911", t0=1_700_000_000_000, tag="new") for i in range(100)],
        file_size=FILE_SIZE,
    )
    top = max_offset(tmp_path / "m") or 0
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=top)
    log = tmp_path / "broker.log"
    log.write_text(
        "2019-12-04 11:35:16 INFO ReadSocketService - slave[/127.0.0.2:38824] request offset 4123389851770370361\n"
        f"2019-12-04 11:35:53 INFO BrokerControllerScheduledThread1 - slave fall behind master: {top} - "
        f"4123389851770370361 = {top - 4123389851770370361} bytes\n"
    )
    code, root = audit(
        tmp_path,
        monkeypatch,
        {"store_dir": str(tmp_path / "m"), "broker_log": str(log)},
        {"store_dir": str(tmp_path / "s")},
    )
    (neg,) = findings(root)
    assert neg["category"] == "negative_lag" and neg["diagnosis"] == "RMQ_FOREIGN_HA_CLIENT"
    assert '"ack_ascii": "99999999"' in neg["detail"]
    assert code == 1


def test_missing_store_is_a_clear_error(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _ = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path)}, {"store_dir": str(tmp_path / "nowhere")})
    assert code == 3 and "nowhere" in capsys.readouterr().err
    inv = write_inventory(
        tmp_path / "inv2.yaml",
        [{"name": "mq", "kind": "rocketmq", "master": {"dir": "/x"}, "replica": {"store_dir": "/y"}}],
    )
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out2")], monkeypatch) == 2
    assert "master.dir" in capsys.readouterr().err


def test_live_pair_written_during_the_audit_gives_no_false_positive(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The master keeps appending and HA keeps copying to the slave (cutting records anywhere) while the
    audit lists and reads both stores: lag and torn tails at most, no divergence."""
    import threading
    import time

    from audit.local.rocketmq_commitlog import CommitLogWriter

    w = CommitLogWriter(tmp_path / "m", file_size=FILE_SIZE)
    w.extend(msg(i, host="10.0.0.2:10911", t0=1_700_000_000_000, tag="new") for i in range(200))
    w.sync()
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=w.max_offset)
    stop = threading.Event()
    written = {"n": 200}

    def live() -> None:
        i, copied = 200, w.max_offset
        while not stop.is_set() and i < 3000:
            w.append(msg(i, host="10.0.0.2:10911", t0=1_700_000_000_000, tag="new"))
            w.sync()  # a broker's writes are in its mmap at once; HA reads from there
            if i % 7 == 0:  # HA ships a chunk: everything up to a point that may cut the last record
                upto = w.max_offset - 13
                replicate(tmp_path / "m", tmp_path / "s", start=copied, upto=upto)
                copied = upto
            i += 1
            written["n"] = i
            time.sleep(0.001)

    t = threading.Thread(target=live, daemon=True)
    t.start()
    try:
        code, root = audit(
            tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")}
        )
    finally:
        stop.set()
        t.join()
        w.close()
    assert written["n"] > 300  # both stores really grew while being read
    assert {f["category"] for f in findings(root)} <= {"torn_tail"} and code == 0


def _damaged_pair(tmp_path: Path, damage: str) -> tuple[dict[str, str], dict[str, str]]:
    """The reviewer's stores: 5 files of 4 KiB (the last one short), copied to the slave, then damaged."""
    offsets = write_store(tmp_path / "m", [msg(i) for i in range(120)], file_size=4096, preallocate=False)
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=offsets[-1] + 1000, preallocate=False)
    for side in ("m", "s"):
        folder = tmp_path / side / "commitlog"
        if damage == "gap":
            (folder / "00000000000000008192").unlink()
        elif damage == "loop":
            (folder / "00000000000000008192").unlink()
            (folder / "00000000000000008192").symlink_to("00000000000000008192")
    if damage == "overflow":
        (tmp_path / "m" / "commitlog" / "99999999999999999999").write_bytes(b"\0" * 100)
    return {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")}


@pytest.mark.parametrize(("damage", "reason"), [("loop", "unreadable_file"), ("overflow", "name_out_of_range")])
def test_a_damaged_run_of_files_fails_the_gate_naming_the_file(tmp_path, monkeypatch, damage, reason) -> None:  # type: ignore[no-untyped-def]
    master, replica = _damaged_pair(tmp_path, damage)
    code, root = audit(tmp_path, monkeypatch, master, replica)
    got = findings(root)
    assert {f["category"] for f in got} == {"corrupt_record"} and code == 1
    name = "00000000000000008192" if damage == "loop" else "99999999999999999999"
    assert all(f'"file": "{name}"' in f["detail"] and f'"reason": "{reason}"' in f["detail"] for f in got)
    s = summary(root)["pairs"][0]
    assert s["status"] == "failed"
    if damage == "loop":  # both sides: 2 findings, the 4 KiB they lack not compared (once)
        assert len(got) == 2 and s["coverage"]["bytes_not_compared"] == 4096


def test_stores_of_empty_files_are_not_audited(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    for side in ("m", "s"):
        (tmp_path / side / "commitlog").mkdir(parents=True)
        (tmp_path / side / "commitlog" / ("0" * 20)).touch()
    code, root = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")})
    assert code == 3 and "no commit-log data: all 1 files are empty" in " ".join(capsys.readouterr().err.split())
    assert summary(root)["pairs"][0]["status"] == "error"
    assert "Traceback" not in (root / "summary.json").read_text() + (root / "report.html").read_text()


def test_ha_files_with_nothing_parsable_are_never_taken_as_checked(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """ha_status or broker_log pointing at a binary file is an error naming it; broker logs without one HA
    line leave the ack unchecked, which fails the gate as uncovered; broker_status is read and compared."""
    offsets = write_store(tmp_path / "m", [msg(i) for i in range(100)], file_size=FILE_SIZE)
    top = max_offset(tmp_path / "m") or 0
    assert offsets
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=top)
    binary = str(tmp_path / "m" / "commitlog" / ("0" * 20))
    quiet = tmp_path / "quiet.log"
    quiet.write_text("2025-01-01 00:00:00 INFO main - The broker[broker-a] boot success\n")
    status = tmp_path / "status.txt"
    status.write_text(f"commitLogMinOffset              : 0\ncommitLogMaxOffset              : {top - 10}\n")

    def pair(name: str, **master: str) -> dict[str, Any]:
        store = {"store_dir": str(tmp_path / "m"), **master}
        return {"name": name, "kind": "rocketmq", "master": store, "replica": {"store_dir": str(tmp_path / "s")}}

    pairs = [
        pair("ha_bin", ha_status=binary),
        pair("log_bin", broker_log=binary),
        pair("status_bad", broker_status=str(quiet)),
        pair("log_quiet", broker_log=str(quiet)),
        pair("status", broker_status=str(status)),
    ]
    inv = write_inventory(tmp_path / "inv.yaml", pairs)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert f"ha_status {binary}: binary data, not a text file: nothing parsable was found" in err
    assert f"broker_log {binary}: binary data, not a text file: nothing parsable was found" in err
    assert f"broker_status {quiet}: no commitLogMaxOffset found: nothing parsable" in err
    by_pair = {p["pair"]: p for p in summary(latest_run(tmp_path / "out"))["pairs"]}
    assert [by_pair[p]["status"] for p in ("ha_bin", "log_bin", "status_bad")] == ["error"] * 3
    quiet_pair = by_pair["log_quiet"]
    assert quiet_pair["status"] == "failed" and quiet_pair["metrics"]["ha_ack_evidence"] == 0
    assert "no HA line in broker_log" in quiet_pair["checks"]["ha"]["reason"]
    assert any("ack offset not checked" in str(n) for n in quiet_pair["not_covered"])
    ok = by_pair["status"]
    assert ok["status"] == "passed" and "ha_ack_evidence" not in ok["metrics"]
    assert (ok["metrics"]["master_status_max_offset"], ok["metrics"]["master_status_offset_diff"]) == (top - 10, 10)


def test_a_store_named_by_a_connection_is_read_with_its_broker_files(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`master: conn:<id>`: the connection's store directory and its broker_status, as the provider's form
    stores them (Airflow's JSON form in AIRFLOW_CONN_<ID> outside Airflow)."""
    write_store(tmp_path / "m", [msg(i) for i in range(60)], file_size=FILE_SIZE)
    top = max_offset(tmp_path / "m") or 0
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=top)
    status = tmp_path / "status.txt"
    status.write_text(f"commitLogMaxOffset              : {top}\n")
    conn = {"conn_type": "replica_audit_rocketmq", "extra": {"store_dir": str(tmp_path / "m"), "broker_status": ""}}
    conn["extra"]["broker_status"] = str(status)
    monkeypatch.setenv("AIRFLOW_CONN_MQ_A", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW_CONN_MQ_S", json.dumps({"conn_type": "fs", "extra": {"path": str(tmp_path / "s")}}))
    code, root = audit(tmp_path, monkeypatch, "conn:mq_a", "conn:mq_s")  # type: ignore[arg-type]
    s = summary(root)["pairs"][0]
    assert code == 0 and s["status"] == "passed", s
    assert s["metrics"]["master_status_max_offset"] == top and s["metrics"]["master_status_offset_diff"] == 0
    assert s["coverage"]["master_records"] == 60


def test_what_a_damaged_slave_could_not_read_is_not_compared_and_no_lag_is_claimed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A slave with 250 of the master's 300 records and a body changed in record 42: reading its only file
    stops there. What lies after is unknown: counted as not compared up to the master's end, and no
    'master − replica' gap is derived from the damage point."""
    offsets = write_store(tmp_path / "m", [msg(i) for i in range(300)], file_size=64 * 1024)
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=offsets[250])
    (commitlog,) = (tmp_path / "s" / "commitlog").iterdir()
    data = bytearray(commitlog.read_bytes())
    body = b"order 00000042"
    at = data.find(body)
    assert at > 0
    data[at : at + len(body)] = b"ORDER 00000042"
    commitlog.write_bytes(bytes(data))
    code, root = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")})
    assert code == 1
    s = summary(root)["pairs"][0]
    m = s["metrics"]
    damage_at = m["replica_max_offset"]
    assert m["replica_end_unknown"] == 1 and m["master_end_unknown"] == 0
    assert s["coverage"]["bytes_not_compared"] == m["master_max_offset"] - damage_at > 0
    assert s["coverage"]["bytes_compared"] == damage_at - m["common_start"]
    html = (root / "report.html").read_text()
    assert "master − replica at the last sample" not in html


def test_one_store_given_as_both_sides_is_refused(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # a store compared with itself agrees on every byte; a symlink is the same store under another name
    (tmp_path / "m" / "commitlog").mkdir(parents=True)
    shutil.copy(FIXTURE, tmp_path / "m" / "commitlog" / FIXTURE.name)
    (tmp_path / "alias").symlink_to(tmp_path / "m")
    code, _ = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "alias")})
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"both endpoints reach one server (store directory {tmp_path / 'm'})" in err, err


def test_a_slave_left_behind_by_the_masters_retention_is_not_a_silent_pass(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The slave stopped inside file 1; the master went on and its retention deleted files 0-4. The slave's
    whole log lies before the master's first file: no byte in common, and the master no longer holds what
    the slave would need next. Nothing compared is uncovered, which the gate fails, never exit 0."""
    offsets = write_store(tmp_path / "m", [msg(i) for i in range(1000)], file_size=FILE_SIZE)
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=offsets[150])
    for i in range(5):
        (tmp_path / "m" / "commitlog" / f"{i * FILE_SIZE:020d}").unlink()
    code, root = audit(tmp_path, monkeypatch, {"store_dir": str(tmp_path / "m")}, {"store_dir": str(tmp_path / "s")})
    s = summary(root)["pairs"][0]
    assert s["coverage"]["common_bytes"] == 0
    assert [f["category"] for f in findings(root)] == []
    assert code == 1 and s["status"] != "passed"
    assert any("before the master's first file" in line for line in s["not_covered"]), s["not_covered"]
