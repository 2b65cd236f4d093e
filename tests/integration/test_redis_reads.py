"""The snapshot's key reader on a real server: big keys in bounded pages, keys changing under it, the keys/s cap."""

from __future__ import annotations

import time
from typing import Any

import pytest

from audit.errors import SourceError
from audit.local.redis_server import RedisServer
from audit.sources.redis.client import connect
from audit.sources.redis.keys import OK, UNSTABLE, VANISHED, KeyReader
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side

pytestmark = pytest.mark.integration


@pytest.fixture()
def server(redis_pair):  # type: ignore[no-untyped-def]
    master, _ = redis_pair
    c = master.client(9)
    c.flushdb()
    yield master
    c.flushdb()


def reader(server: RedisServer, page: int) -> KeyReader:
    pipe = RespPipe(connect(server.url, role="test"))
    pipe.execute([(b"SELECT", b"9")])
    return KeyReader(pipe, page, window_bytes=64)


def test_big_keys_stream_in_pages_and_digest_as_if_read_whole(server) -> None:  # type: ignore[no-untyped-def]
    c = server.client(9)
    c.hset("h", mapping={f"f{i}": i for i in range(5000)})
    c.rpush("l", *range(2500))
    c.sadd("s", *range(3000))
    c.zadd("z", {f"m{i}": i / 3 for i in range(2200)})
    for i in range(1200):
        c.xadd("x", {"i": i})
    c.set("str", b"x" * 1000)
    keys = [b"h", b"l", b"s", b"z", b"x", b"str"]
    paged = {s.key: s for s in reader(server, page=100).read(keys)}
    whole = {s.key: s for s in reader(server, page=100_000).read(keys)}
    for k in keys:
        assert paged[k].status == OK and paged[k].digest == whole[k].digest, k
    lengths = {b"h": 5000, b"l": 2500, b"s": 3000, b"z": 2200, b"x": 1200, b"str": 1000}
    assert {k: paged[k].length for k in keys} == lengths == {k: whole[k].length for k in keys}


class InterferingPipe(RespPipe):
    """Runs actions on the real server right after the n-th batch: a change between two reads."""

    def __init__(self, *a: Any, actions: dict[int, Any]) -> None:
        super().__init__(*a)
        self.actions, self.calls = actions, 0

    def recv(self, ticket: int) -> list[Any]:
        replies = super().recv(ticket)
        self.calls += 1
        if self.calls in self.actions:
            self.actions[self.calls]()
        return replies


def test_keys_that_vanish_or_change_type_mid_read_are_handled(server) -> None:  # type: ignore[no-untyped-def]
    c = server.client(9)
    c.set("gone", "1")
    c.rpush("morph", *range(10))
    c.sadd("set-gone", "a", "b")
    c.hset("shrinks", mapping={f"f{i}": i for i in range(2000)})
    c.hset("shrinks", "one-more", "1")  # converts to hashtable: HSCAN pages of ~10

    def change_type() -> None:  # between TYPE/PTTL and the value batch
        c.delete("morph")
        c.set("morph", "now a string")
        c.delete("set-gone")

    def shrink() -> None:  # after HLEN and the first page of the re-read, before the next pages
        c.hdel("shrinks", *[f"f{i}" for i in range(1000)])

    # replies: 1 SELECT, 2 TYPE/PTTL, 3 the first pages, 4 HLEN of the long hash, 5 its re-read's first page
    pipe = InterferingPipe(connect(server.url, role="test"), actions={2: change_type, 5: shrink})
    pipe.execute([(b"SELECT", b"9")])
    states = {s.key: s for s in KeyReader(pipe, 10, 64).read([b"gone", b"morph", b"set-gone", b"shrinks", b"never"])}
    assert states[b"never"].status == VANISHED
    assert states[b"set-gone"].status == VANISHED  # TYPE said set, SSCAN found it empty
    assert states[b"morph"].status == UNSTABLE  # TYPE said list, LRANGE got WRONGTYPE
    assert states[b"shrinks"].status == UNSTABLE  # HLEN said 2001, the scan found fewer
    c.delete("gone")
    assert KeyReader(pipe, 10, 64).read([b"gone"])[0].status == VANISHED


@pytest.mark.parametrize("kind", ["hash", "list", "zset", "stream", "string"])
def test_a_key_replaced_by_another_type_between_its_pages_is_unstable_not_unreadable(server, kind) -> None:  # type: ignore[no-untyped-def]
    """A long key read page by page (GETRANGE windows for a string) and replaced meanwhile by a key of
    another type (RENAME onto it, or DEL and a write in one MULTI) answers WRONGTYPE at its next page.
    That is a key written while read, as WRONGTYPE at the first page already was: unstable, for the
    recheck to read again. It was `error`, an unreadable key that failed a healthy pair's gate."""
    c = server.client(9)
    {
        "hash": lambda: c.hset("k", mapping={f"f{i}": i for i in range(1000)}),
        "list": lambda: c.rpush("k", *range(1000)),
        "zset": lambda: c.zadd("k", {f"m{i}": i for i in range(1000)}),
        "stream": lambda: [c.xadd("k", {"i": i}) for i in range(100)],
        "string": lambda: c.set("k", b"s" * 300),
    }[kind]()
    c.sadd("other", "a", "b")

    def replace() -> None:  # after the first page (or window), before the next
        c.rename("other", "k")

    # replies: 1 SELECT, 2 TYPE/PTTL, 3 the first pages, 4 the length command, 5 the re-read's first page
    pipe = InterferingPipe(connect(server.url, role="test"), actions={4 if kind == "string" else 5: replace})
    pipe.execute([(b"SELECT", b"9")])
    (state,) = KeyReader(pipe, 10, 64).read([b"k"])
    assert (state.status, state.type) == (UNSTABLE, kind), state
    assert state.error is not None and state.error.startswith("WRONGTYPE")


def test_an_empty_stream_is_a_key_not_a_vanished_one(server) -> None:  # type: ignore[no-untyped-def]
    c = server.client(9)
    c.xgroup_create("made-empty", "g", id="$", mkstream=True)  # exists with no entry
    entry = c.xadd("emptied", {"a": "1"})
    c.xdel("emptied", entry)
    for i in range(20):
        c.xadd("trimmed", {"i": i})
    c.xadd("one", {"a": "1"})

    def trim() -> None:  # after the first page (full) and XLEN, before the re-read: emptied, not gone
        c.xtrim("trimmed", maxlen=0, approximate=False)

    # replies: 1 SELECT, 2 TYPE/PTTL, 3 the first pages, 4 XLEN of the long stream
    pipe = InterferingPipe(connect(server.url, role="test"), actions={3: trim})
    pipe.execute([(b"SELECT", b"9")])
    states = {s.key: s for s in KeyReader(pipe, 10, 64).read([b"made-empty", b"emptied", b"trimmed", b"one"])}
    for k in (b"made-empty", b"emptied"):
        assert (states[k].status, states[k].type, states[k].length) == (OK, "stream", 0), states[k]
        assert states[k].digest == states[b"made-empty"].digest != states[b"one"].digest
    assert (states[b"trimmed"].status, states[b"trimmed"].type) == (UNSTABLE, "stream")
    c.delete("made-empty")
    assert KeyReader(pipe, 10, 64).read([b"made-empty"])[0].status == VANISHED


def test_max_keys_per_s_caps_the_snapshot_rate(server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = server.client(9)
    c.mset({f"k{i}": i for i in range(2000)})
    options = SnapshotOptions(max_keys_per_s=2000, scan_count=100)
    started = time.monotonic()
    meta = snapshot_side(c, side="master", endpoint="test", dbs=[9], out_dir=tmp_path, options=options)
    elapsed = time.monotonic() - started
    # 2000 keys at 2000 keys/s, less a burst of a tenth of a second: at least 0.9 s (uncapped: ~30 ms)
    assert meta["stats"]["keys_ok"] == 2000 and elapsed >= 0.85
    assert meta["pacing"]["pacing_wait_s"] > 0  # the pacer, not a slow client, held it back


def _snapshot_stalling_batches(client: Any, tmp_path: Any, bound_ms: float) -> dict[str, Any]:
    """Snapshot 5000 strings of 8 KiB in db 9 in batches of up to 1000 keys, sampling after every batch.

    A probe behind a 1000-key batch (8 MB of replies) waits several ms: past 1 ms, never near 1 s.
    (Bounds under about 0.5 ms measure the client's own round trip more than a stall.) The whole
    snapshot takes about 60 ms, so a sample every 10 ms was sometimes taken only behind SCAN pages and
    key heads, which stall well under 1 ms, and saw no stall (about 1 run in 10); a sample per batch
    always follows the value batches too.
    """
    options = SnapshotOptions(scan_count=1000, max_latency_ms=bound_ms, sample_every_s=0.0001)
    return snapshot_side(client, side="master", endpoint="test", dbs=[9], out_dir=tmp_path, options=options)


@pytest.mark.parametrize("bound_ms", [1.0, 1000.0])
def test_batches_that_stall_the_server_past_the_latency_bound_shrink(server, tmp_path, bound_ms) -> None:  # type: ignore[no-untyped-def]
    c = server.client(9)
    c.mset({f"k{i}": b"v" * 8192 for i in range(5000)})
    meta = _snapshot_stalling_batches(c, tmp_path, bound_ms)
    pacing = meta["pacing"]
    assert meta["stats"]["keys_ok"] == 5000 and pacing["samples"] > 0
    if bound_ms == 1.0:
        assert pacing["batch_shrinks"] >= 1 and pacing["batch_limit_keys_at_end"] < 1000
    else:  # no false alarm on a server that keeps within the bound
        assert pacing["batch_shrinks"] == 0 and pacing["backoffs"] == 0 and pacing["batch_limit_keys_at_end"] == 1000


def test_a_user_refused_info_stats_still_gets_the_latency_bound(server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import redis

    admin = server.client(9)
    admin.mset({f"k{i}": b"v" * 8192 for i in range(5000)})
    # INFO for the sections the snapshot records, not `stats` (Redis 7 ACL rules on a first argument)
    sections = ["+info|server", "+info|replication", "+info|keyspace", "+client|list"]
    admin.acl_setuser("noinfo", enabled=True, passwords=["+pw"], commands=["+@read", "+select", *sections], keys=["*"])
    try:
        c = redis.Redis(port=server.port, username="noinfo", password="pw", db=9, protocol=2, lib_name=None)
        with pytest.raises(redis.exceptions.NoPermissionError):
            c.info("stats")
        meta = _snapshot_stalling_batches(c, tmp_path, 1.0)
    finally:
        admin.acl_deluser("noinfo")
    assert meta["stats"]["keys_ok"] == 5000
    assert meta["pacing"]["batch_shrinks"] >= 1  # the probe's round trip counts without INFO stats


def test_one_client_snapshots_more_often_than_its_pool_holds_connections(server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server.client(9).mset({f"k{i}": i for i in range(20)})
    client = connect(server.url, role="test")
    try:
        runs = client.connection_pool.max_connections + 5  # each snapshot opens (and closes) a pipe
        for i in range(runs):
            out, options = tmp_path / f"{i}", SnapshotOptions()
            meta = snapshot_side(client, side="master", endpoint="test", dbs=[9], out_dir=out, options=options)
            assert meta["stats"]["keys_ok"] == 20
    finally:
        client.close()


def test_sides_in_processes_read_what_threads_read(redis_pair, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    from audit.errors import SourceConnectError
    from audit.sources.redis.sides import SideJob, snapshot_sides

    master, replica = redis_pair
    c = master.client(8)
    c.flushdb()
    c.mset({f"s{i}": i for i in range(300)})
    c.hset("h", mapping={f"f{i}": i for i in range(50)})
    c.rpush(b"\x00bin", *range(20))
    deadline = time.monotonic() + 10
    while replica.client(8).dbsize() < 302 and time.monotonic() < deadline:
        time.sleep(0.05)
    seen: dict[str, int] = {}

    def jobs(tag: str) -> list[SideJob]:
        return [
            SideJob(s, srv.url, f"{s}-endpoint", [8], tmp_path / tag / s)
            for s, srv in (("master", master), ("replica", replica))
        ]

    def rows(tag: str, side: str) -> list[tuple[object, ...]]:
        t = pq.read_table(tmp_path / tag / side / "keys.parquet", columns=["key", "type", "length", "digest", "status"])
        return sorted(zip(*[t.column(n).to_pylist() for n in t.column_names], strict=True))

    on_keys = lambda side, n: seen.__setitem__(side, seen.get(side, 0) + n)  # noqa: E731
    metas = snapshot_sides(jobs("p"), SnapshotOptions(), processes=True, on_keys=on_keys)
    snapshot_sides(jobs("t"), SnapshotOptions(), processes=False)
    assert metas["master"]["endpoint"] == "master-endpoint" and metas["replica"]["stats"]["keys_ok"] == 302
    assert seen == {"master": 302, "replica": 302}
    for side in ("master", "replica"):
        assert rows("p", side) == rows("t", side) and len(rows("p", side)) == 302
    assert rows("p", "master") == rows("p", "replica")
    c.flushdb()
    bad = SideJob("replica", "redis://127.0.0.1:1", "127.0.0.1:1", [0], tmp_path / "bad")
    with pytest.raises(SourceConnectError, match=r"127\.0\.0\.1:1"):
        snapshot_sides([bad], SnapshotOptions(), processes=True)


MAIN_SCRIPT = """
import pathlib, sys
with open(sys.argv[1], "a") as marker:
    marker.write(__name__ + "\\n")  # each import of this script, by its name
if __name__ == "__main__":
    from audit.sources.redis.sides import SideJob, snapshot_sides
    from audit.sources.redis.snapshot import SnapshotOptions

    job = SideJob("master", sys.argv[2], "master-endpoint", [7], pathlib.Path(sys.argv[3]))
    metas = snapshot_sides([job], SnapshotOptions(), processes=True)
    print(metas["master"]["stats"]["keys_ok"], __file__ == sys.argv[0])
"""


@pytest.mark.parametrize("run_as", ["script", "module"])
def test_snapshot_processes_do_not_import_the_callers_main_module(redis_pair, tmp_path, run_as) -> None:  # type: ignore[no-untyped-def]
    # a spawned child imports the parent's main script (Airflow's, under Airflow) or `-m` module first
    import subprocess
    import sys

    master, _ = redis_pair
    c = master.client(7)
    c.flushdb()
    c.mset({f"k{i}": i for i in range(40)})
    script, marker = tmp_path / "caller.py", tmp_path / "imports"
    script.write_text(MAIN_SCRIPT)
    main = [str(script)] if run_as == "script" else ["-m", "caller"]
    args = [sys.executable, *main, str(marker), master.url, str(tmp_path / "out")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    c.flushdb()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["40", "True"]  # the snapshot read every key; the main module has its file back
    assert marker.read_text().split() == ["__main__"]  # the child did not import the script as __mp_main__


SLOW_SCRIPT = """
import pathlib, sys
from audit.sources.redis.sides import SideJob, snapshot_sides
from audit.sources.redis.snapshot import SnapshotOptions

jobs = [SideJob(side, sys.argv[1], side, [6], pathlib.Path(sys.argv[2]) / side) for side in ("master", "replica")]
try:
    snapshot_sides(jobs, SnapshotOptions(max_keys_per_s=1000, max_latency_ms=None), processes=True)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("how", ["parent killed", "ctrl-c"])
def test_snapshot_processes_end_with_their_parent(redis_pair, tmp_path, how) -> None:  # type: ignore[no-untyped-def]
    # a parent killed outright runs no `finally`: its children read the servers to the end, orphaned; a
    # Ctrl-C reached the children too, and one still importing printed a KeyboardInterrupt traceback
    import os
    import signal
    import subprocess
    import sys

    import psutil

    master, _ = redis_pair
    c = master.client(6)
    c.flushdb()
    c.mset({f"k{i:05d}": i for i in range(20_000)})  # twenty seconds per side at the cap
    script = tmp_path / "caller.py"
    script.write_text(SLOW_SCRIPT)
    err_file = tmp_path / "stderr"
    with err_file.open("wb") as err:  # a file, not a pipe: the children hold it too, so its end waits for theirs
        proc = subprocess.Popen(
            [sys.executable, str(script), master.url, str(tmp_path / "out")],
            stderr=err,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(
                signal.SIGINT, signal.SIG_DFL
            ),  # as in a terminal, whatever the runner ignores
        )
    try:
        deadline = time.time() + 60
        while not all((tmp_path / "out" / s / "keys.parquet").is_dir() for s in ("master", "replica")):
            assert time.time() < deadline and proc.poll() is None, "the snapshot did not start"
            time.sleep(0.05)
        children = [p for p in psutil.Process(proc.pid).children() if "multiprocessing.spawn" in " ".join(p.cmdline())]
        assert len(children) == 2
        if how == "parent killed":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to the whole group
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(children, timeout=5)
        assert alive == [], "a snapshot process went on reading the server"
        assert "Traceback" not in err_file.read_text(), err_file.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        c.flushdb()


def test_a_failed_side_stops_the_other_in_threads_mode(redis_pair, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a thread cannot be terminated as a side's process is: the other side used to read its whole keyspace
    # (twenty seconds here) before the first side's error came out
    from audit.errors import ConfigError
    from audit.sources.redis.sides import SideJob, snapshot_sides

    master, _ = redis_pair
    c = master.client(6)
    c.flushdb()
    c.mset({f"k{i:05d}": i for i in range(20_000)})  # twenty seconds at the cap
    jobs = [
        SideJob("master", master.url, "m", [6], tmp_path / "master"),
        SideJob("replica", master.url, "r", [99_999], tmp_path / "replica"),  # no such db: refused at once
    ]
    try:
        with pytest.raises(ConfigError, match="no such db"):
            snapshot_sides(jobs, SnapshotOptions(max_keys_per_s=1000, max_latency_ms=None), processes=False)
        assert not (tmp_path / "master" / "snapshot.json").exists(), "the master side read its whole keyspace"
    finally:
        c.flushdb()


def test_a_db_the_server_refuses_to_select_is_an_error_naming_it_not_a_read_of_the_last_db(server) -> None:  # type: ignore[no-untyped-def]
    # the recheck and the fleet readers SELECT a key's db and read on: a refused SELECT was not looked at,
    # so the key was read in whatever db the pipe had selected before
    server.client(9).set(b"in-db-9", b"x")
    pipe = RespPipe(connect(server.url, role="test"))
    try:
        pipe.select(9)
        with pytest.raises(SourceError, match=rf"127\.0\.0\.1:{server.port}: SELECT 4096 refused: .*out of range"):
            pipe.select(4096)
        pipe.select(10)
        assert pipe.call((b"EXISTS", b"in-db-9")) == 0  # the pipe goes on, in the db it was asked for
    finally:
        pipe.close()
