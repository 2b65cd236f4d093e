"""Fleet snapshot throughput: a 3-master cluster read as Spark tasks, next to a baseline measured in the
same run (`snapshot_side` on one standalone server holding the same keys, in one process).

    .venv/bin/python bench/fleet_snapshot_bench.py [--keys 300000] [--masters 3]

Prints keys/s for: (a) the baseline, (b) the cluster through `snapshot_fleet` in driver threads (the
GIL shares one core), (c) the cluster through Spark tasks (one task per shard, local[*]: separate
Python workers, so they can use every core), each with its ratio to (a), and the driver's peak RSS.
A first Spark run warms the JVM and the Python workers up and is reported apart.
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hiredis import ReplyError

from audit.local.redis_cluster import start_cluster
from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.endpoints import parse_endpoint
from audit.sources.redis.fleet_snapshot import side_tasks, snapshot_fleet
from audit.sources.redis.resp import Command, RespPipe
from audit.sources.redis.routing import key_slot
from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side
from audit.sources.redis.topology import Topology, discover

OPTIONS = SnapshotOptions(qps=10_000_000)


def load(route: Callable[[bytes], RespPipe], n: int, seed: int = 1) -> None:
    """70% strings of 20-100 bytes, 30% hashes of 5-20 fields, 20% with a TTL, in pipelined batches."""
    rnd = random.Random(seed)
    batches: dict[int, tuple[RespPipe, list[Command]]] = {}

    def flush(pipe: RespPipe, cmds: list[Command]) -> None:
        bad = [r for r in pipe.execute(cmds) if isinstance(r, ReplyError)]
        if bad:
            raise RuntimeError(f"load failed: {bad[0]}")
        cmds.clear()

    for i in range(n):
        if rnd.random() < 0.7:
            key = b"str:%d" % i
            cmd: Command = (b"SET", key, rnd.randbytes(rnd.randint(20, 100)))
        else:
            key = b"hash:%d" % i
            flat = [x for j in range(rnd.randint(5, 20)) for x in (b"f%d" % j, rnd.randbytes(16))]
            cmd = (b"HSET", key, *flat)
        pipe = route(key)
        _, cmds = batches.setdefault(id(pipe), (pipe, []))
        cmds.append(cmd)
        if rnd.random() < 0.2:
            cmds.append((b"PEXPIRE", key, b"%d" % rnd.randint(3_600_000, 7_200_000)))
        if len(cmds) >= 2000:
            flush(pipe, cmds)
    for pipe, cmds in batches.values():
        if cmds:
            flush(pipe, cmds)


def rate(keys: int, seconds: float) -> float:
    return keys / max(seconds, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=300_000)
    ap.add_argument("--masters", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    standalone = RedisServer(free_port(), root / "standalone").start()
    cluster = start_cluster(root / "cluster", masters=args.masters, replicas_per_master=0)
    try:
        one = RespPipe(standalone.client())
        load(lambda _: one, args.keys)
        topo: Topology = discover(parse_endpoint({"url": cluster.url(), "topology": "cluster"}, "bench"))
        pipes = {s.master.addr: RespPipe(connect(s.master.url, role="bench")) for s in topo.shards}
        owner = {slot: s.master.addr for s in topo.shards for a, b in s.slots for slot in range(a, b + 1)}
        load(lambda k: pipes[owner[key_slot(k)]], args.keys)

        t = time.time()
        meta = snapshot_side(
            connect(standalone.url, role="bench"),
            side="master",
            endpoint=standalone.url,
            dbs=[0],
            out_dir=root / "base",
            options=OPTIONS,
        )
        base_s = time.time() - t
        base = rate(meta["stats"]["keys_scanned"], base_s)
        print(f"keys: {args.keys}, shards: {args.masters}")
        print(f"(a) baseline snapshot_side, one standalone:  {base:>9,.0f} keys/s  ({base_s:.1f} s)")

        tasks = side_tasks("master", topo)
        t = time.time()
        fleet = snapshot_fleet(tasks, root / "threads", OPTIONS, threads=len(tasks))
        s = time.time() - t
        n = sum(r.rows for r in fleet.results)
        print(
            f"(b) cluster, driver threads:                  {rate(n, s):>9,.0f} keys/s  "
            f"({s:.1f} s, x{rate(n, s) / base:.2f})"
        )

        from audit.diff.spark import get_spark

        spark = get_spark()
        parallelism = spark.sparkContext.defaultParallelism
        t = time.time()
        snapshot_fleet(tasks, root / "spark-warm", OPTIONS, spark=spark)
        print(f"    Spark warm-up run (JVM, Python workers):  {time.time() - t:.1f} s")
        for run in (1, 2):
            t = time.time()
            fleet = snapshot_fleet(tasks, root / f"spark{run}", OPTIONS, spark=spark)
            s = time.time() - t
            n = sum(r.rows for r in fleet.results)
            assert not fleet.errors, fleet.errors
            print(
                f"(c) cluster, Spark tasks (local, {parallelism} cores) #{run}: {rate(n, s):>9,.0f} keys/s  "
                f"({s:.1f} s, x{rate(n, s) / base:.2f})"
            )
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"driver peak RSS: {rss:.0f} MiB (Spark's JVM and Python workers are separate processes)")
    finally:
        cluster.stop()
        standalone.stop()


if __name__ == "__main__":
    main()
