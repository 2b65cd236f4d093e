"""The auditor never harms what it audits: while a whole audit runs, MONITOR records every command each
server receives, and none may be a write or an admin command beyond the ones the README's ACL grants.

The Redis audit runs as the ACL user the README documents (the line is read from the README itself), so
a command outside that ACL would also be refused by the server: MONITOR does not show administrative
commands at all, so for those the ACL is the proof, and MONITOR the proof that nothing was written.
Pika has no ACLs: its audit runs through the Pika face (tests/pika_front.py), and MONITOR watches
the real redis-servers behind it.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from audit.local.redis_server import RedisServer, start_pair, wait_in_sync
from audit.local.sample import load_sample
from tests.conftest import REPO
from tests.integration.helpers import latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration
README_ACL = re.compile(r"`(ACL SETUSER auditor [^`]+)`")
MARK = "replica-audit-test-monitor:"
"""ECHOed by the test around the audit (Monitor), left out of what the auditor sent."""
ALLOWED_ADMIN = {"client|list"}
"""Admin commands the documented ACL grants on purpose (who is connected: the SYNC-replica diagnosis)."""


def documented_acl(password: str) -> list[str]:
    line = README_ACL.search((REPO / "README.md").read_text())
    assert line is not None, "the README documents the auditor's ACL"
    words = shlex.split(line.group(1))
    return [w if not w.startswith(">") else f">{password}" for w in words[3:]]  # after ACL SETUSER auditor


class Monitor:
    """`MONITOR` on one server, in a thread; `commands()` gives (client address, [name, arg1]) seen.

    Entered once MONITOR shows a mark sent after it started, left once it shows a mark sent after the
    block: the feed is in the server's order of execution, so every command of the block was read
    (fixed sleeps instead could miss the first or last commands on a loaded machine)."""

    def __init__(self, server: RedisServer) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=server.port)
        self.marker = redis.Redis(host="127.0.0.1", port=server.port)
        self.seen: list[tuple[str, list[str]]] = []
        self._marks = {"start": threading.Event(), "end": threading.Event()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.client.monitor() as m:
            conn = m.connection
            assert conn is not None
            while not self._stop.is_set():
                if conn.can_read(timeout=0.2):
                    c = m.next_command()
                    words = str(c["command"]).split(" ")
                    if words[0].lower() == "echo" and len(words) == 2 and words[1].startswith(MARK):
                        self._marks[words[1].removeprefix(MARK)].set()  # the test's own, not the auditor's
                        continue
                    self.seen.append((f"{c['client_address']}:{c['client_port']}", [w.lower() for w in words[:2]]))

    def _mark(self, which: str) -> None:
        """Until MONITOR has shown a mark sent now (sent again while MONITOR may not be on yet)."""
        deadline = time.monotonic() + 60
        while not self._marks[which].is_set():
            assert self._thread.is_alive() and time.monotonic() < deadline, f"MONITOR never showed the {which} mark"
            self.marker.echo(MARK + which)
            self._marks[which].wait(0.2)

    def __enter__(self) -> Monitor:
        self._thread.start()
        self._mark("start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._mark("end")
        self._stop.set()
        self._thread.join(timeout=5)
        self.marker.close()

    def commands(self, exclude: set[str]) -> list[tuple[str, list[str]]]:
        return [(addr, args) for addr, args in self.seen if addr not in exclude]


def replication_links(*servers: RedisServer) -> set[str]:
    """The replication connections' addresses as each side sees them (their traffic is not the auditor's)."""
    found = set()
    for s in servers:
        for c in redis.Redis(host="127.0.0.1", port=s.port).client_list():
            if set(c.get("flags", "")) & {"S", "M"}:
                found.add(c["addr"])
    return found


def flags_of(server: RedisServer, args: list[str]) -> tuple[str, set[str]]:
    """The command's name (with its subcommand for container commands) and its flags per COMMAND INFO."""
    r = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
    name = args[0]
    info = r.execute_command("COMMAND", "INFO", name).get(name)
    if info is None:
        return name, {"unknown"}
    sub = f"{name}|{args[1]}" if len(args) > 1 else ""
    for entry in info.get("subcommands") or []:
        if entry[0] == sub:
            return sub, set(entry[2])
    return name, set(info["flags"])


def assert_read_only(server: RedisServer, seen: list[tuple[str, list[str]]]) -> set[str]:
    names = set()
    for _, args in seen:
        name, flags = flags_of(server, args)
        names.add(name)
        assert "write" not in flags, f"the auditor sent a write: {args[:4]}"
        assert "admin" not in flags or name in ALLOWED_ADMIN, f"the auditor sent an admin command: {args[:4]}"
    return names


@pytest.fixture()
def loaded_pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    master, replica = start_pair(tmp_path / "servers")
    load_sample(master.client(), n_keys=3000, big_hash_fields=3000)
    load_sample(master.client(2), n_keys=200, big_hash_fields=10, seed=3)
    wait_in_sync(master, replica)
    yield master, replica
    replica.stop()
    master.stop()


def test_a_redis_audit_as_the_documented_acl_user_sends_no_write_or_admin_command(
    loaded_pair: tuple[RedisServer, RedisServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, replica = loaded_pair
    password = "Acl-pw-7"
    for s in (master, replica):
        s.client().execute_command("ACL", "SETUSER", "auditor", *documented_acl(password))
    r = replica.client()
    r.config_set("replica-read-only", "no")
    r.set(b"planted", b"1")  # one divergence, so the recheck runs too
    urls = [f"redis://auditor:{password}@127.0.0.1:{s.port}" for s in (master, replica)]
    inv = write_inventory(
        tmp_path / "inv.yaml", [{"name": "acl", "kind": "redis", "master": urls[0], "replica": urls[1]}]
    )
    links = replication_links(master, replica)
    with Monitor(master) as m_mon, Monitor(replica) as r_mon:
        code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    assert code == 1 and summary(latest_run(tmp_path / "out"))["pairs"][0]["counts"] == {"extra_on_replica": 1}
    seen = {side: mon.commands(links) for side, mon in (("master", m_mon), ("replica", r_mon))}
    assert len(seen["master"]) > 100 and len(seen["replica"]) > 100  # MONITOR did watch the audit
    names = assert_read_only(master, seen["master"]) | assert_read_only(replica, seen["replica"])
    assert {"scan", "type", "pttl", "info"} <= names


def test_a_pika_audit_sends_no_write_or_admin_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.pika_front import start_pika_pair

    master, replica = start_pair(tmp_path / "pika")
    fm, fs = start_pika_pair(master.port, replica.port, [0, 1])
    try:
        for db in (0, 1):
            master.client(db).mset({f"k{db}:{i}": i for i in range(500)})
        wait_in_sync(master, replica)
        links = replication_links(master, replica)
        inv = write_inventory(
            tmp_path / "inv.yaml", [{"name": "pk", "kind": "pika", "dbs": [0, 1], "master": fm.url, "replica": fs.url}]
        )
        with Monitor(master) as m_mon, Monitor(replica) as r_mon:
            code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
        assert code == 0, summary(latest_run(tmp_path / "out"))["pairs"][0]
        for server, mon in ((master, m_mon), (replica, r_mon)):
            seen = mon.commands(links)
            assert len(seen) > 50
            assert_read_only(server, seen)
    finally:
        for s in (fs, fm, replica, master):
            s.stop()
