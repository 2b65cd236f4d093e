"""Snapshot throughput against a throwaway redis-server, next to baselines measured in the same run.

    .venv/bin/python bench/snapshot_bench.py [--keys 1000000] [--quick] [--sides] [--before REV] [--profile]

Loads the mix of the end-to-end pair (bench/datasets.py: 70% strings of 16-200 bytes, the rest hashes,
lists, sets and zsets of 5-50 elements, 20% with a TTL), then times on the same data: (a) bare SCAN,
(b) what a naive tool does (SCAN + a redis-py pipeline of DUMP + PTTL per key), (c) a plain reader, a
reference for the server's cost: SCAN, then TYPE, PTTL and the whole value in one command per key, the
types known beforehand (no length command, no paging, no digest), (d) `snapshot_side` (type, TTL, length
and digest per key; pacing's back-off off, no cap). For each: keys/s, the client's
CPU, and redis-server's CPU (INFO cpu) per million keys, so a faster client that made the server pay
would show. With --sides a replica is attached and both servers are snapshotted at once, one thread
per side (how the pipeline did it) and one process per side (`snapshot_sides`). With --before REV
(e.g. de9fef6, the commit before issue 12) the snapshot_side of that revision runs too, from a detached
git worktree in a subprocess against the same server: the "before" of the same run, next to
this tree's snapshot_side run the same way (a fresh interpreter each, start-up included). Prints peak RSS.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import redis
import worktree
from datasets import load_mix, peak_rss_mb, wait_replica_synced

from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.sides import SideJob, snapshot_sides
from audit.sources.redis.snapshot import KEYS_FILE, SnapshotOptions, snapshot_side

TARGET, AIM = 150_000, 250_000
ROOT = Path(__file__).resolve().parent.parent
UNPACED = SnapshotOptions(max_latency_ms=None)


def raw_scan(client: redis.Redis) -> int:
    cursor, n = 0, 0
    while True:
        cursor, keys = client.scan(cursor, count=1000)
        n += len(keys)
        if cursor == 0:
            return n


def naive_dump(client: redis.Redis) -> int:
    cursor, n = 0, 0
    while True:
        cursor, keys = client.scan(cursor, count=1000)
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.dump(k)
            pipe.pttl(k)
        n += len(pipe.execute()) // 2
        if cursor == 0:
            return n


# The whole value of each type in one command: the plain reader's value reads.
_WHOLE_VALUE: dict[bytes, tuple[bytes, ...]] = {
    b"string": (b"GET",),
    b"hash": (b"HGETALL",),
    b"set": (b"SMEMBERS",),
    b"zset": (b"ZRANGE", b"0", b"-1", b"WITHSCORES"),
    b"list": (b"LRANGE", b"0", b"-1"),
    b"stream": (b"XRANGE", b"-", b"+"),
}


def _scan_page(client: redis.Redis, cursor: int) -> tuple[int, list[bytes]]:
    cursor, keys = client.scan(cursor, count=1000)
    return int(cursor), [k if isinstance(k, bytes) else k.encode() for k in keys]


def key_types(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key's type (read before the plain reader is timed: it knows the types for free)."""
    pipe, cursor = RespPipe(client), 0
    types: dict[bytes, bytes] = {}
    try:
        while True:
            cursor, keys = _scan_page(client, cursor)
            types.update(zip(keys, pipe.execute([(b"TYPE", k) for k in keys]), strict=True))
            if cursor == 0:
                return types
    finally:
        pipe.close()


def plain_reader(client: redis.Redis, types: dict[bytes, bytes]) -> int:
    """SCAN, then TYPE + PTTL + the whole value of every key in one pipeline per page: what the server pays
    for a reader of type, TTL and value with nothing more (no length command, no paging, no digest)."""
    pipe, cursor, n = RespPipe(client), 0, 0
    try:
        while True:
            cursor, keys = _scan_page(client, cursor)
            cmds: list[tuple[bytes, ...]] = []
            for k in keys:
                value = _WHOLE_VALUE[types[k]]
                cmds += [(b"TYPE", k), (b"PTTL", k), (value[0], k, *value[1:])]
            pipe.execute(cmds)
            n += len(keys)
            if cursor == 0:
                return n
    finally:
        pipe.close()


def replica_audit(client: redis.Redis, url: str, out: Path) -> int:
    shutil.rmtree(out, ignore_errors=True)  # a finished snapshot left in place would be resumed: no work
    meta = snapshot_side(client, side="master", endpoint=url, dbs=[0], out_dir=out, options=UNPACED)
    rows = pq.ParquetDataset(out / KEYS_FILE).read(columns=["db"]).num_rows
    ok = meta["stats"]["keys_ok"]
    if rows != ok:
        raise RuntimeError(f"snapshot wrote {rows} rows but counted {ok} ok keys")
    return int(meta["stats"]["keys_scanned"])


OLD_SNAPSHOT = """
import sys, time, json
from pathlib import Path
from audit.sources.redis.client import connect
from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side
c = connect(sys.argv[1], role="before")
try:  # unpaced, like this run's snapshot_side; revisions before pacing had only `qps`
    o = SnapshotOptions(max_latency_ms=None)
except TypeError:
    o = SnapshotOptions(qps=10**9)
m = snapshot_side(c, side="master", endpoint="before", dbs=[0], out_dir=Path(sys.argv[2]), options=o)
print(json.dumps(m["stats"]["keys_scanned"]))
"""


def before_snapshot(rev: str, url: str, tmp: Path) -> Callable[[], int]:
    """A callable running `rev`'s snapshot_side in a subprocess (its CPU counts as this process' children)."""
    return subprocess_snapshot(worktree.add(rev, tmp / "before-tree"), url, tmp / "before-out")


def subprocess_snapshot(tree: Path, url: str, out_dir: Path) -> Callable[[], int]:
    """snapshot_side of the code in `tree`, in a fresh interpreter (its start-up counted, as for --before)."""

    def run() -> int:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        shutil.rmtree(out_dir, ignore_errors=True)  # a repeat must not resume the last run's checkpoint
        out = subprocess.run(
            [sys.executable, "-c", OLD_SNAPSHOT, url, str(out_dir)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return int(out.strip().splitlines()[-1])

    return run


def drop_before_tree(tmp: Path) -> None:
    worktree.remove(tmp / "before-tree")


def both_sides(jobs: list[SideJob], processes: bool) -> int:
    for job in jobs:
        shutil.rmtree(job.out_dir, ignore_errors=True)  # each run reads everything (no resume)
    metas = snapshot_sides(jobs, UNPACED, processes=processes)
    return sum(int(m["stats"]["keys_scanned"]) for m in metas.values())


def server_cpu(clients: list[redis.Redis]) -> float:
    total = 0.0
    for c in clients:
        info = c.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def timed(clients: list[redis.Redis], fn: Callable[[], int]) -> tuple[float, int, float, float]:
    """Wall seconds, keys, this process' (and its children's) CPU seconds, redis-servers' CPU seconds."""
    t = os.times()
    cpu, srv, started = (
        t.user + t.system + t.children_user + t.children_system,
        server_cpu(clients),
        time.perf_counter(),
    )
    n = fn()
    wall = time.perf_counter() - started
    t = os.times()
    return wall, n, t.user + t.system + t.children_user + t.children_system - cpu, server_cpu(clients) - srv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100k keys, one repeat")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each method; the best is reported")
    ap.add_argument("--sides", action="store_true", help="also snapshot master+replica at once: threads vs processes")
    ap.add_argument("--profile", action="store_true", help="also run snapshot_side once under cProfile")
    ap.add_argument("--before", metavar="REV", help="also run snapshot_side of git revision REV (same server)")
    args = ap.parse_args()
    if args.quick:
        args.keys, args.repeat = 100_000, 1
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    with tempfile.TemporaryDirectory(prefix="snapshot-bench-") as tmp:
        servers = [RedisServer(free_port(), Path(tmp) / "redis").start()]
        try:
            client = connect(servers[0].url, role="bench")
            load_s, _ = load_mix(client, args.keys)
            dbsize = client.dbsize()
            print(
                f"loaded {dbsize:,} keys in {load_s:.1f} s; redis used_memory "
                f"{client.info('memory')['used_memory_human']}; rss before snapshots {peak_rss_mb():.0f} MB"
            )
            types = key_types(client)
            methods: list[tuple[str, list[redis.Redis], Callable[[], int]]] = [
                ("raw SCAN COUNT 1000 (baseline 1)", [client], lambda: raw_scan(client)),
                ("SCAN + redis-py DUMP/PTTL (baseline 2)", [client], lambda: naive_dump(client)),
                ("plain reader: SCAN+TYPE+PTTL+whole value", [client], lambda: plain_reader(client, types)),
                (
                    "replica-audit snapshot_side",
                    [client],
                    lambda: replica_audit(client, servers[0].url, Path(tmp) / "s"),
                ),
            ]
            if args.before:
                old = before_snapshot(args.before, servers[0].url, Path(tmp))
                methods.append((f"snapshot_side at {args.before} (before)", [client], old))
                now = subprocess_snapshot(ROOT, servers[0].url, Path(tmp) / "now-out")
                methods.append(("snapshot_side, this tree, same harness", [client], now))
            if args.sides:
                servers.append(
                    RedisServer(
                        free_port(), Path(tmp) / "replica", ["--replicaof", "127.0.0.1", str(servers[0].port)]
                    ).start()
                )
                replica = connect(servers[1].url, role="bench replica")
                wait_replica_synced(client, replica)
                jobs = [
                    SideJob(side, s.url, s.url, [0], Path(tmp) / f"sides-{side}")
                    for side, s in zip(("master", "replica"), servers, strict=True)
                ]
                both = [client, replica]
                methods += [
                    ("both sides, a thread each", both, lambda: both_sides(jobs, processes=False)),
                    ("both sides, a process each", both, lambda: both_sides(jobs, processes=True)),
                ]
            results = []
            for name, clients, fn in methods:
                runs = [timed(clients, fn) for _ in range(args.repeat)]
                results.append((name, *min(runs)))
            report(results)
            if args.profile:
                prof = cProfile.Profile()
                prof.runcall(replica_audit, client, servers[0].url, Path(tmp) / "snap-prof")
                print("\nsnapshot_side under cProfile, top 15 by tottime:")
                pstats.Stats(prof).strip_dirs().sort_stats("tottime").print_stats(15)
        finally:
            for s in servers:
                s.stop()
            drop_before_tree(Path(tmp))
    print(f"\npeak RSS of this process {peak_rss_mb():.0f} MB, of its children {peak_rss_mb(children=True):.0f} MB")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")


def report(results: list[tuple[str, float, int, float, float]]) -> None:
    base = results[0][2] / results[0][1]
    print(
        f"\n{'method':<40} {'seconds':>8} {'keys':>10} {'keys/s':>10} {'vs SCAN':>8} "
        f"{'client CPU s':>12} {'us/key':>7} {'redis CPU s':>11} {'redis s/1M keys':>15}"
    )
    for name, secs, n, cpu, srv in results:
        print(
            f"{name:<40} {secs:>8.2f} {n:>10,} {n / secs:>10,.0f} {n / secs / base:>8.3f} "
            f"{cpu:>12.2f} {cpu / n * 1e6:>7.2f} {srv:>11.2f} {srv / n * 1e6:>15.2f}"
        )
    rate = results[3][2] / results[3][1]
    print(
        f"\ntarget: >= {TARGET:,} keys/s (aim {AIM:,}) with type, TTL and digest per key: "
        f"{rate:,.0f} keys/s, reached {'yes' if rate >= TARGET else 'no'}; "
        f"{rate / (results[1][2] / results[1][1]):.2f}x the naive DUMP, {rate / base:.3f} of raw SCAN"
    )
    plain = results[2][4] / results[2][2]
    ours = results[3][4] / results[3][2]
    naive = results[1][4] / results[1][2]
    print(
        f"server cost per key: snapshot_side {ours * 1e6:.2f} us, the plain reader {plain * 1e6:.2f} us "
        f"({ours / plain:.2f}x), the naive DUMP {naive * 1e6:.2f} us ({ours / naive:.2f}x): at this cost one "
        f"redis-server core answers at most {1 / ours:,.0f} keys/s of this mix"
    )


if __name__ == "__main__":
    main()
