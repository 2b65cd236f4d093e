"""Snapshot throughput against a throwaway redis-server, next to baselines measured in the same run.

    .venv/bin/python bench/snapshot_bench.py [--keys 1000000] [--no-profile]

Loads a realistic mix (70% strings of 20-100 bytes, 30% hashes/lists/sets/zsets of 5-20 elements,
20% with a TTL), then times on the same data: (a) bare SCAN, (b) what a naive tool does (SCAN + a
redis-py pipeline of DUMP + PTTL per key), (c) `snapshot_side` (type, TTL, length and digest per key).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import redis
from hiredis import ReplyError

from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.resp import Command, RespPipe
from audit.sources.redis.snapshot import KEYS_FILE, SnapshotOptions, snapshot_side

TARGET = 100_000


def load(client: redis.Redis, n: int, seed: int = 1) -> float:
    """Write `n` keys through pipelined batches; returns seconds."""
    rnd = random.Random(seed)
    blob = rnd.randbytes(1 << 20)

    def val(lo: int, hi: int) -> bytes:
        size = rnd.randint(lo, hi)
        off = rnd.randrange(len(blob) - size)
        return blob[off : off + size]

    pipe, started = RespPipe(client), time.time()
    cmds: list[Command] = []

    def flush() -> None:
        bad = [r for r in pipe.execute(cmds) if isinstance(r, ReplyError)]
        if bad:
            raise RuntimeError(f"load failed: {bad[0]}")
        cmds.clear()

    for i in range(n):
        r = rnd.random()
        ttl = [b"%d" % rnd.randint(3_600_000, 7_200_000)] if rnd.random() < 0.2 else []
        elems = range(rnd.randint(5, 20))
        if r < 0.7:
            key = b"str:%d" % i
            cmds.append((b"SET", key, val(20, 100), *([b"PX", *ttl] if ttl else [])))
            ttl = []
        elif r < 0.775:
            key = b"hash:%d" % i
            cmds.append((b"HSET", key, *[x for j in elems for x in (b"f%d" % j, val(5, 40))]))
        elif r < 0.85:
            key = b"list:%d" % i
            cmds.append((b"RPUSH", key, *[val(5, 40) for _ in elems]))
        elif r < 0.925:
            key = b"set:%d" % i
            cmds.append((b"SADD", key, *[b"m%d:%b" % (j, val(4, 20)) for j in elems]))
        else:
            key = b"zset:%d" % i
            cmds.append((b"ZADD", key, *[x for j in elems for x in (b"%d" % rnd.randint(0, 10**6), b"m%d" % j)]))
        if ttl:
            cmds.append((b"PEXPIRE", key, ttl[0]))
        if len(cmds) >= 20_000:
            flush()
    flush()
    pipe.close()
    return time.time() - started


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


def replica_audit(client: redis.Redis, url: str, out: Path) -> int:
    meta = snapshot_side(client, side="master", endpoint=url, dbs=[0], out_dir=out, options=SnapshotOptions(max_latency_ms=None))
    rows = pq.ParquetFile(out / KEYS_FILE).metadata.num_rows
    ok = meta["stats"]["keys_ok"]
    if rows != ok:
        raise RuntimeError(f"snapshot wrote {rows} rows but counted {ok} ok keys")
    return int(meta["stats"]["keys_scanned"])


def server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def timed(client: redis.Redis, fn: Callable[[], int]) -> tuple[float, int, float, float]:
    """Wall seconds, keys, this process' CPU seconds, redis-server CPU seconds."""
    cpu, srv, started = time.process_time(), server_cpu(client), time.perf_counter()
    n = fn()
    wall = time.perf_counter() - started
    return wall, n, time.process_time() - cpu, server_cpu(client) - srv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run replica-audit's snapshot once under cProfile (default: yes)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="snapshot-bench-") as tmp:
        server = RedisServer(free_port(), Path(tmp) / "redis").start()
        try:
            client = connect(server.url, role="bench")
            load_s = load(client, args.keys)
            dbsize = client.dbsize()
            print(
                f"loaded {dbsize:,} keys in {load_s:.1f} s ({dbsize / load_s:,.0f} keys/s); "
                f"redis used_memory {client.info('memory')['used_memory_human']}"
            )
            methods: list[tuple[str, Callable[[], int]]] = [
                ("raw SCAN COUNT 1000 (baseline 1)", lambda: raw_scan(client)),
                ("SCAN + redis-py DUMP/PTTL (baseline 2)", lambda: naive_dump(client)),
                ("replica-audit snapshot_side", lambda: replica_audit(client, server.url, Path(tmp) / "snap")),
            ]
            results = [(name, *timed(client, fn)) for name, fn in methods]
            base = results[0][2] / results[0][1]
            print(
                f"\n{'method':<40} {'seconds':>8} {'keys':>10} {'keys/s':>10} {'vs SCAN':>8} "
                f"{'client CPU s':>12} {'redis CPU s':>11}"
            )
            for name, secs, n, cpu, srv in results:
                print(
                    f"{name:<40} {secs:>8.2f} {n:>10,} {n / secs:>10,.0f} {n / secs / base:>8.3f} "
                    f"{cpu:>12.2f} {srv:>11.2f}"
                )
            rate = results[2][2] / results[2][1]
            print(
                f"\ntarget: >= {TARGET:,} keys/s (type, TTL and digest per key): "
                f"{rate:,.0f} keys/s, reached {'yes' if rate >= TARGET else 'no'}"
            )
            print(f"snapshot_side vs naive DUMP: {rate / (results[1][2] / results[1][1]):.2f}x")
            if args.profile:
                prof = cProfile.Profile()
                prof.runcall(replica_audit, client, server.url, Path(tmp) / "snap-prof")
                print("\nsnapshot_side under cProfile, top 15 by tottime:")
                pstats.Stats(prof).strip_dirs().sort_stats("tottime").print_stats(15)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
