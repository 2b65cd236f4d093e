"""What a snapshot costs the other clients of the server it reads: unpaced, capped, and adaptive.

    .venv/bin/python bench/pacing_bench.py [--keys 300000] [--quick] [--cap 20000]

Loads bench/datasets.py's mix into a throwaway redis-server, starts a concurrent client in its own
process (a steady loop of GET round trips, as an application would send) and measures, per phase:
the server's instantaneous_ops_per_sec (INFO stats, sampled every 0.25 s), the concurrent client's
ops/s and its p50/p99 latency. Phases: idle (the baseline, same run), a snapshot with no pacing at
all, one capped by `max_keys_per_s`, and one with only the adaptive pacing (a bound of 1 ms on the stall
a probe sent right behind a batch sees). Prints the snapshot's keys/s, batch shrinks and rate back-offs
for each, the batch size it ended at, and peak RSS.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from datasets import load_mix, peak_rss_mb

from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side


def app_client(port: int, stop: Any, out: Any) -> None:
    """GET round trips on one connection until `stop` is set; sends (time, latency_s) of each to `out`."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = b"*2\r\n$3\r\nGET\r\n$7\r\nstr:100\r\n"
    samples: list[tuple[float, float]] = []
    while not (len(samples) % 64 == 0 and stop.is_set()):
        t0 = time.perf_counter()
        s.sendall(req)
        buf = s.recv(65536)
        while not buf.endswith(b"\r\n") or (buf[:1] == b"$" and buf.count(b"\r\n") < 2):
            buf += s.recv(65536)
        samples.append((time.time(), time.perf_counter() - t0))
    s.close()
    out.send(samples)


def server_ops(client: Any, stop: threading.Event, into: list[tuple[float, int]]) -> None:
    while not stop.is_set():
        ops = int(client.info("stats")["instantaneous_ops_per_sec"])
        into.append((time.time(), ops))
        stop.wait(0.25)


def phase_stats(samples: list[tuple[float, float]], ops: list[tuple[float, int]], t0: float, t1: float) -> str:
    lat = sorted(dt for t, dt in samples if t0 <= t < t1)
    srv = [o for t, o in ops if t0 <= t < t1]
    if not lat:
        return "no samples"
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return (
        f"server {statistics.mean(srv) if srv else 0:>9,.0f} ops/s | app {len(lat) / (t1 - t0):>7,.0f} GET/s, "
        f"p50 {statistics.median(lat) * 1000:6.2f} ms, p99 {p99 * 1000:6.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=300_000)
    ap.add_argument("--quick", action="store_true", help="100k keys")
    ap.add_argument("--cap", type=float, default=20_000, help="max_keys_per_s of the capped phase")
    args = ap.parse_args()
    if args.quick:
        args.keys = 100_000
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    phases = [
        ("idle (baseline)", None),
        ("snapshot, unpaced", SnapshotOptions(max_latency_ms=None)),
        (f"snapshot, max_keys_per_s={args.cap:g}", SnapshotOptions(max_keys_per_s=args.cap, max_latency_ms=None)),
        ("snapshot, adaptive (latency bound 1 ms)", SnapshotOptions(max_latency_ms=1.0, sample_every_s=0.25)),
    ]
    with tempfile.TemporaryDirectory(prefix="pacing-bench-") as tmp:
        server = RedisServer(free_port(), Path(tmp) / "redis").start()
        try:
            client = connect(server.url, role="bench")
            load_mix(client, args.keys)
            print(f"loaded {client.dbsize():,} keys")
            ctx = mp.get_context("spawn")
            recv, send = ctx.Pipe(duplex=False)
            app_stop = ctx.Event()
            app = ctx.Process(target=app_client, args=(server.port, app_stop, send))
            ops: list[tuple[float, int]] = []
            stop = threading.Event()
            sampler = threading.Thread(target=server_ops, args=(connect(server.url, role="ops"), stop, ops))
            app.start()
            sampler.start()
            time.sleep(2.0)  # the app client's start and first round trips
            spans = []
            for name, options in phases:
                t0 = time.time()
                meta = None
                if options is None:
                    time.sleep(3.0)
                else:
                    meta = snapshot_side(
                        client,
                        side="master",
                        endpoint=server.url,
                        dbs=[0],
                        out_dir=Path(tmp) / str(len(spans)),
                        options=options,
                    )
                spans.append((name, t0, time.time(), meta))
                time.sleep(1.0)  # let the server's ops/s average settle between phases
            app_stop.set()
            samples = recv.recv()
            app.join()
            stop.set()
            sampler.join()
        finally:
            server.stop()
    head = f"{'phase':<42} {'seconds':>7} {'keys/s':>9} {'shrinks/backoffs/batch':>22}"
    print(f"\n{head}  what the server and the app saw")
    for name, t0, t1, meta in spans:
        rate = f"{meta['stats']['keys_scanned'] / (t1 - t0):>9,.0f}" if meta else f"{'':>9}"
        pacing = meta["pacing"] if meta else {}
        steps = f"{pacing['batch_shrinks']}/{pacing['backoffs']}/{pacing['batch_keys_at_end']}" if meta else ""
        print(f"{name:<42} {t1 - t0:>7.2f} {rate} {steps:>22}  {phase_stats(samples, ops, t0, t1)}")
    print(f"\npeak RSS of this process {peak_rss_mb():,.0f} MB; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
