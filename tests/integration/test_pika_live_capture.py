"""The real Pika 4.0 capture (tests/fixtures/pika-live) through `replica-audit run`: binlogs that agree
record for record, and 900 SETEX keys the slave does not hold. The audit must connect the two facts:
every missing key carries its last binlog record on both sides and the not-applied diagnosis, and the
summary says it in one line.

The capture's binlogs are used as they are; its key lists (a SCAN of each db of each side) are loaded
into two real redis-servers served through Pika faces (tests/pika_front.py) whose INFO reports the
capture's manifests, so the servers say what the real Pika said: replication healthy, offsets equal.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from audit.local.redis_server import RedisServer, free_port
from tests.conftest import FIXTURES
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.pika_front import PikaFront, master_info, slave_info

pytestmark = pytest.mark.integration
CAPTURE = FIXTURES / "pika-live"
DBS = [0, 1, 2]


def test_keys_lost_between_the_slaves_binlog_and_its_data_are_explained(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with tarfile.open(CAPTURE / "binlogs.tar.gz") as tar:
        tar.extractall(tmp_path / "logs", filter="data")
    keys = json.loads((CAPTURE / "keys.json").read_text())
    servers = {side: RedisServer(free_port(), tmp_path / side).start() for side in ("master", "slave")}
    for side, server in servers.items():  # two independent servers: only the captured key lists matter
        for db, names in keys[side].items():
            server.client(int(db)).mset({name: b"v" for name in names})
    fm = PikaFront(servers["master"].port, master_info(tmp_path / "logs" / "master", DBS, 0))
    fs = PikaFront(servers["slave"].port, slave_info(tmp_path / "logs" / "slave", DBS, 0))
    fm.port, fs.port = free_port(), free_port()
    fm.info_replication = master_info(tmp_path / "logs" / "master", DBS, fs.port)
    fs.info_replication = slave_info(tmp_path / "logs" / "slave", DBS, fm.port)
    fm.start()
    fs.start()
    try:
        pair = {
            "name": "live",
            "kind": "pika",
            "dbs": DBS,
            "master": fm.url,
            "replica": fs.url,
            "binlog": {
                "master_dir": str(tmp_path / "logs" / "master"),
                "replica_dir": str(tmp_path / "logs" / "slave"),
            },
        }
        inv = write_inventory(tmp_path / "inv.yaml", [pair])
        code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    finally:
        fs.stop()
        fm.stop()
        for server in servers.values():
            server.stop()
    root = latest_run(tmp_path / "out")
    found = findings(root)
    missing = [f for f in found if f["category"] == "missing_on_replica"]
    assert code == 1 and len(missing) == 900
    assert {f["category"] for f in found} == {"missing_on_replica"}  # the binlogs agree: nothing else
    assert {f["diagnosis"] for f in missing} == {"PIKA_NOT_APPLIED"}
    detail = json.loads(missing[0]["detail"])
    assert detail["last_command"] == "pksetexat" and detail["layer"] == "not_applied"
    m_write, s_write = detail["binlog"]["master"], detail["binlog"]["replica"]
    assert m_write["command"] == "pksetexat" and m_write["at"] == s_write["at"]  # same file:offset on both sides
    s = summary(root)["pairs"][0]
    assert any(
        line.startswith("900 keys written by pksetexat are shipped but absent on the slave") for line in s["headlines"]
    ), s["headlines"]
    assert s["coverage"]["binlog_records_aligned"] == 10_610 and s["coverage"]["binlog_records_shifted"] == 0
    assert "900 keys written by pksetexat" in (root / "report.html").read_text()
