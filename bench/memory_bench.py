"""Peak RSS of a snapshot that meets one huge hash: memory must follow the page size, not the key's size.

    .venv/bin/python bench/memory_bench.py [--fields 10000000] [--quick] [--page 10000]

Loads one hash of N fields (16-byte field names, 8-40 byte values) plus 10,000 small strings into a
throwaway redis-server, then snapshots it with `snapshot_side` (HSCAN pages of --page fields) and prints
this process' peak RSS before and after, next to a same-run baseline: the peak RSS of snapshotting the
10,000 small strings alone. The 2 GiB binlog case is `bench/pika_binlog_bench.py --memory`.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from datasets import peak_rss_mb
from hiredis import ReplyError

from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side


def load_hash(client: object, fields: int) -> float:
    rnd = random.Random(3)
    blob = rnd.randbytes(1 << 16)
    pipe = RespPipe(client)  # type: ignore[arg-type]
    started = time.time()
    batch: list[bytes] = []
    cmds = []
    for i in range(fields):
        off = rnd.randrange(len(blob) - 40)
        batch += [b"field:%010d" % i, blob[off : off + 8 + i % 33]]
        if len(batch) >= 2000:
            cmds.append((b"HSET", b"big", *batch))
            batch = []
            if len(cmds) >= 50:
                _run(pipe, cmds)
                cmds = []
    if batch:
        cmds.append((b"HSET", b"big", *batch))
    _run(pipe, cmds)
    _run(pipe, [(b"SET", b"small:%d" % i, b"v%d" % i) for i in range(10_000)])
    pipe.close()
    return time.time() - started


def _run(pipe: RespPipe, cmds: list[tuple[bytes, ...]]) -> None:
    bad = [r for r in pipe.execute(cmds) if isinstance(r, ReplyError)]
    if bad:
        raise RuntimeError(f"load failed: {bad[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fields", type=int, default=10_000_000)
    ap.add_argument("--quick", action="store_true", help="1M fields")
    ap.add_argument("--page", type=int, default=10_000, help="HSCAN COUNT / big_key_elements")
    args = ap.parse_args()
    if args.quick:
        args.fields = 1_000_000
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        server = RedisServer(free_port(), Path(tmp) / "redis").start()
        try:
            client = connect(server.url, role="bench")
            # baseline first, on the small keys only (db 1), so the peak it sets is the floor
            small = connect(server.url.rstrip("/") + "/1", role="bench db1")
            small.mset({f"small:{i}": i for i in range(10_000)})
            options = SnapshotOptions(page=args.page, max_latency_ms=None)
            snapshot_side(small, side="m", endpoint="bench", dbs=[1], out_dir=Path(tmp) / "base", options=options)
            base = peak_rss_mb()
            load_s = load_hash(client, args.fields)
            info = client.info("memory")
            print(
                f"loaded a hash of {client.hlen('big'):,} fields in {load_s:.1f} s "
                f"(redis used_memory {info['used_memory_human']})"
            )
            started = time.perf_counter()
            meta = snapshot_side(
                client, side="m", endpoint="bench", dbs=[0], out_dir=Path(tmp) / "big", options=options
            )
            secs = time.perf_counter() - started
            st = meta["stats"]
            print(
                f"snapshot: {st['keys_ok']:,} keys ok, {st['keys_unstable']} unstable in {secs:.1f} s "
                f"({args.fields / secs:,.0f} hash fields/s), {st['commands']:,} commands"
            )
        finally:
            server.stop()
    peak = peak_rss_mb()
    print(
        f"peak RSS: {base:,.0f} MB after snapshotting 10,000 small keys (baseline), {peak:,.0f} MB after the "
        f"{args.fields:,}-field hash in pages of {args.page:,} (+{peak - base:,.0f} MB)"
    )


if __name__ == "__main__":
    main()
