"""End to end: a 1M-key master/replica pair with 10 planted differences through `replica-audit run`.

    .venv/bin/python bench/e2e_bench.py [--keys 1000000] [--quick] [--keep] [--cpu] [--before REV] [--spark-connect]
        [--repeat N]

Builds the pair (a real redis-server master and a `replicaof` replica; bench/datasets.py's mix: 70%
strings of 16-200 bytes, the rest hashes, lists, sets and zsets of 5-50 elements, 20% with TTLs),
plants 10 differences on the replica (a missing key, an extra key, two string values, a hash field, a
list element, a set member, a zset score, a type, a TTL), then runs in the same process run:

- `redis-cli --scan` of the master (a floor: listing the keys, nothing read);
- `replica-audit run` as a subprocess, with the per-stage split from the run's state (snapshot, diff
  including Spark's start, recheck, gate and report) and which of the 10 it found;
- `../shared/peers/redis-full-check` (one compare round) on the same pair when that binary is there,
  and which of the 10 it found (it scans the source only and does not compare TTLs).

The inventory sets `qps` high so the deprecated command cap (qps/4 keys/s) does not bind; pacing's
other defaults apply. Prints peak RSS of this process and of the audit subprocess. With --cpu, the CPU
seconds of each process of the run (its Python process, the snapshot processes, the Spark JVM, the two
redis-servers) during the snapshot stage and after it, against what the machine's cores had
(bench/proc_cpu.py). With --before REV (a git revision), then REV's `replica-audit run` and this tree's,
alternated --repeat times on the same pair, both as `python -m audit` from a fresh interpreter (REV from
a git worktree): a before and after measured in the same quarter hour by one command. With
--spark-connect, then runs with their own driver JVM and runs on a Spark Connect server started for
the bench (docs/spark.md, "A Connect server that stays up"), alternated --repeat times; the peer's ratio
is to its round above.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import worktree
from datasets import load_mix, peak_rss_mb, plant_differences, wait_replica_synced
from proc_cpu import CpuSampler

from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "peers" / "redis-full-check"
if not PEER.exists():
    PEER = Path("/work/shared/peers/redis-full-check")
TARGETS = {"total": 25.0, "snapshot": 10.0, "diff": 5.0, "recheck": 2.0, "gate": 1.0}
STAGES = ("snapshot", "diff", "recheck", "gate + report")


def timed_cmd(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall seconds, exit code, and the child's peak RSS in MB (its own, from wait4)."""
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - started, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024


def redis_cli_scan(port: int, work: Path) -> float | None:
    exe = shutil.which("redis-cli")
    if exe is None:
        return None
    secs, _, _ = timed_cmd([exe, "-p", str(port), "--scan"], work, work / "scan.txt")
    return secs


def run_audit(
    m: RedisServer, r: RedisServer, work: Path, tree: Path | None = None, extra: tuple[str, ...] = ()
) -> tuple[float, int, float, Path]:
    """`replica-audit run` on the pair: the installed command, or with `tree` the code of that checkout
    (`python -m audit` with it first on the path), with `extra` options. Inventory, output and log under `work`."""
    work.mkdir(parents=True, exist_ok=True)
    inv = work / "inventory.yaml"
    inv.write_text(
        "defaults: {qps: 1000000000}\n"
        "pairs:\n"
        "  - name: e2e\n"
        "    kind: redis\n"
        f"    master: {m.url}\n"
        f"    replica: {r.url}\n"
        "    dbs: [0]\n"
    )
    out = work / "out"
    command, env = [str(Path(sys.executable).with_name("replica-audit"))], None
    if tree is not None:
        command, env = [sys.executable, "-m", "audit"], {**os.environ, "PYTHONPATH": str(tree)}
    args = [*command, "run", "--inventory", str(inv), "--out", str(out), *extra]
    secs, code, rss = timed_cmd(args, work, work / "audit.log", env)
    # a run directory has a manifest; `out` also holds shared folders (the GX Data Docs context)
    runs = sorted(p.parent for p in out.glob("*/manifest.json")) if out.exists() else []
    if not runs:
        raise RuntimeError(f"replica-audit run wrote no run directory (exit {code}); see {work / 'audit.log'}")
    return secs, code, rss, runs[0]


def stage_split(run_dir: Path, started_ms: int, ended_ms: int) -> dict[str, float]:
    state = json.loads((run_dir / "work" / "e2e" / "state.json").read_text())
    at = {k: v["at_ms"] for k, v in state.get("stages", {}).items()}
    split, last = {}, started_ms
    for stage in ("snapshot", "diff", "recheck"):
        if stage in at:
            split[stage] = (at[stage] - last) / 1000
            last = at[stage]
    split["gate + report"] = (ended_ms - last) / 1000
    for side in ("master", "replica"):
        meta_path = run_dir / "snapshots" / "e2e" / side / "snapshot.json"
        if meta_path.exists():
            pacing = json.loads(meta_path.read_text()).get("pacing", {})
            split[f"  ({side} back-offs)"] = float(pacing.get("backoffs", 0))
            split[f"  ({side} batch shrinks)"] = float(pacing.get("batch_shrinks", 0))
    m = state.get("metrics", {})
    for k in ("master_snapshot_s", "replica_snapshot_s", "master_keys_per_s", "replica_keys_per_s", "diff_s"):
        if k in m:
            split[f"  ({k})"] = m[k]
    return split


def found_by_audit(run_dir: Path, planted: list[tuple[str, bytes]]) -> set[bytes]:
    path = run_dir / "findings.parquet" / "e2e.parquet"
    if not path.exists():
        return set()
    keys = {bytes(k) for k in pq.read_table(path, columns=["key"]).column("key").to_pylist() if k is not None}
    return {k for _, k in planted if k in keys}


def run_peer(m: RedisServer, r: RedisServer, work: Path) -> tuple[float, set[bytes], int] | None:
    if not PEER.exists():
        return None
    peer_dir = work / "rfc"
    peer_dir.mkdir()
    cmd = [
        str(PEER),
        "-s",
        f"127.0.0.1:{m.port}",
        "-t",
        f"127.0.0.1:{r.port}",
        "-m",
        "1",
        "--comparetimes",
        "1",
        "-d",
        "result.db",
        "--result",
        "result.txt",
        "--log",
        "rfc.log",
    ]
    secs, code, _ = timed_cmd(cmd, peer_dir, peer_dir / "stdout.log")
    result = peer_dir / "result.txt"
    text = result.read_bytes() if result.exists() else b""
    return secs, {line.split(b"\t")[2] for line in text.splitlines() if line.count(b"\t") >= 2}, code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100k keys")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (printed)")
    ap.add_argument("--cpu", action="store_true", help="also print each process's CPU seconds (Linux /proc)")
    ap.add_argument("--before", metavar="REV", help="then REV's run and this tree's, alternated on the same pair")
    ap.add_argument("--repeat", type=int, default=2, help="with --before or --spark-connect: runs of each (default 2)")
    ap.add_argument(
        "--spark-connect", action="store_true", help="then runs on their own JVM and on a Connect server, alternated"
    )
    args = ap.parse_args()
    if args.quick:
        args.keys = 100_000
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    work = Path(tempfile.mkdtemp(prefix="e2e-bench-"))
    m = RedisServer(free_port(), work / "master").start()
    r = RedisServer(free_port(), work / "replica", ["--replicaof", "127.0.0.1", str(m.port)]).start()
    try:
        master, replica = connect(m.url, role="master"), connect(r.url, role="replica")
        load_s, _ = load_mix(master, args.keys)
        wait_replica_synced(master, replica)
        planted = plant_differences(replica, args.keys)
        print(
            f"pair: {master.dbsize():,} keys on the master, {replica.dbsize():,} on the replica (loaded in "
            f"{load_s:.1f} s); planted: {', '.join(what for what, _ in planted)}"
        )
        scan_s = redis_cli_scan(m.port, work)
        sampler = CpuSampler() if args.cpu else None
        if sampler is not None:
            sampler.start()
        started_ms = int(time.time() * 1000)
        audit_s, code, audit_rss, run_dir = run_audit(m, r, work)
        ended_ms = int(time.time() * 1000)
        if sampler is not None:
            sampler.stop()
        split = stage_split(run_dir, started_ms, ended_ms)
        found = found_by_audit(run_dir, planted)
        peer = run_peer(m, r, work)
        report(args.keys, scan_s, audit_s, code, split, found, planted, peer, audit_rss)
        if sampler is not None:
            cpu_report(
                sampler,
                started_ms,
                started_ms + split["snapshot"] * 1000,
                ended_ms,
                {m.port: "master", r.port: "replica"},
            )
        if args.before:
            compare_revisions(args.before, args.repeat, m, r, work, planted)
        if args.spark_connect:
            compare_connect(args.repeat, m, r, work, planted, peer[0] if peer else None)
    finally:
        m.stop()
        r.stop()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def compare_revisions(
    rev: str, repeat: int, m: RedisServer, r: RedisServer, work: Path, planted: list[tuple[str, bytes]]
) -> None:
    """REV's `replica-audit run` and this tree's on the same pair, alternated, both as `python -m audit`
    in a fresh interpreter: the same harness for both, so what differs is the code (the installed
    command's own script is not compared). The audit only reads, so every run sees the same pair."""
    trees = {rev: worktree.add(rev, work / "before-tree"), "this tree": ROOT}
    print(f"\n{'revision, alternated':<24} {'run s':>7} " + " ".join(f"{s:>8}" for s in STAGES) + "   found")
    try:
        for i in range(repeat):
            for n, (label, tree) in enumerate(trees.items()):
                print(run_row(label, m, r, work / f"compare-{i}-{n}", planted, tree=tree), flush=True)
    finally:
        worktree.remove(work / "before-tree")


def compare_connect(
    repeat: int, m: RedisServer, r: RedisServer, work: Path, planted: list[tuple[str, bytes]], peer_s: float | None
) -> None:
    """`replica-audit run` with its own driver JVM (the default) and with `--spark-master sc://...` on a
    Connect server started and warmed up here as `replica-audit spark-server` does (local[*], the local
    defaults), alternated."""
    from audit.diff.connect_server import ConnectServer, warm_up

    with (work / "connect-server.log").open("wb") as log:
        server = ConnectServer(port=free_port()).start(log)
    try:
        warm_s = warm_up(server.url, work / "warm-up")
        print(f"\nConnect server {server.url}: warmed up in {warm_s:.1f} s, as spark-server does")
        _alternate_with_server(server.url, repeat, m, r, work, planted, peer_s)
    finally:
        server.stop()


def _alternate_with_server(
    url: str,
    repeat: int,
    m: RedisServer,
    r: RedisServer,
    work: Path,
    planted: list[tuple[str, bytes]],
    peer_s: float | None,
) -> None:
    header = f"{'own JVM / Connect server':<24} {'run s':>7} " + " ".join(f"{s:>8}" for s in STAGES)
    print(header + "   found  peer x")
    for i in range(repeat):
        for label, extra in (("own JVM", ()), (f"server, run {i + 1}", ("--spark-master", url))):
            row = run_row(label, m, r, work / f"connect-{i}-{label[:3]}", planted, extra=extra, peer_s=peer_s)
            print(row, flush=True)


def run_row(
    label: str,
    m: RedisServer,
    r: RedisServer,
    work: Path,
    planted: list[tuple[str, bytes]],
    tree: Path | None = None,
    extra: tuple[str, ...] = (),
    peer_s: float | None = None,
) -> str:
    """One `run_audit` as a table row: wall time, the stages, how many planted were found, and the
    ratio to the peer's round when given."""
    started_ms = int(time.time() * 1000)
    secs, code, _, run_dir = run_audit(m, r, work, tree, extra)
    split = stage_split(run_dir, started_ms, int(time.time() * 1000))
    stages = " ".join(f"{split.get(s, float('nan')):>8.2f}" for s in STAGES)
    found = len(found_by_audit(run_dir, planted))
    ratio = f"  {secs / peer_s:>6.2f}x" if peer_s else ""
    return f"{label + f' (exit {code})':<24} {secs:>7.2f} {stages}   {found}/10{ratio}"


def cpu_report(sampler: CpuSampler, start_ms: float, snap_end_ms: float, end_ms: float, ports: dict[int, str]) -> None:
    """CPU seconds per process of the run, before and after the snapshot stage's end, against 2 cores' worth."""

    def label(cmd: str) -> str | None:
        if "redis-server" in cmd:
            port = cmd.split()[1].rsplit(":", 1)[-1] if len(cmd.split()) > 1 else ""
            side = ports.get(int(port)) if port.isdigit() else None
            return f"redis-server ({side})" if side else None
        if "replica-audit" in cmd and " run " in cmd:
            return "replica-audit run (python)"
        if "multiprocessing" in cmd:
            return "snapshot processes (python)"
        if "java" in cmd and "spark" in cmd:
            return "Spark driver JVM"
        return "the kernel's threads" if cmd.startswith("[") else "other processes"

    phases = [(start_ms, snap_end_ms), (snap_end_ms, end_ms)]
    used = [sampler.between(a / 1000, b / 1000, label) for a, b in phases]
    cores = os.cpu_count() or 1
    gap = sampler.largest_gap_s()
    print(f"\n{f'CPU seconds (from /proc; samples at most {gap:.2f} s apart)':<56} {'snapshot':>9} {'the rest':>9}")
    for name in sorted(set(used[0]) | set(used[1]), key=lambda n: -(used[0][n] + used[1][n])):
        print(f"  {name:<54} {used[0][name]:>9.2f} {used[1][name]:>9.2f}")
    totals = [sum(u.values()) for u in used]
    avail = [cores * (b - a) / 1000 for a, b in phases]
    print(
        f"  {'all of the above / ' + str(cores) + ' cores x wall':<54} "
        + " ".join(f"{t:>4.1f}/{a:<4.1f}" for t, a in zip(totals, avail, strict=True))
    )


def report(
    keys: int,
    scan_s: float | None,
    audit_s: float,
    code: int,
    split: dict[str, float],
    found: set[bytes],
    planted: list[tuple[str, bytes]],
    peer: tuple[float, set[bytes], int] | None,
    audit_rss: float,
) -> None:
    print(f"\n{'tool':<44} {'wall s':>8} {'found':>7}")
    if scan_s is not None:
        print(f"{'redis-cli --scan of the master (floor)':<44} {scan_s:>8.2f} {'':>7}")
    print(f"{'replica-audit run (exit ' + str(code) + ')':<44} {audit_s:>8.2f} {len(found):>4}/10")
    for stage, secs in split.items():
        target = TARGETS.get(stage.split()[0].strip("( "))
        print(f"  {stage:<42} {secs:>8.2f}" + (f"   target < {target:g} s" if target and stage[0] != " " else ""))
    if peer is not None:
        secs, keys_found, peer_code = peer
        hit = {k for _, k in planted if k in keys_found}
        print(f"{'redis-full-check 1 round (exit ' + str(peer_code) + ')':<44} {secs:>8.2f} {len(hit):>4}/10")
        print(f"\nreplica-audit / redis-full-check: {audit_s / secs:.2f}x (target <= 2x; aim < 1x)")
    else:
        print(f"\n{PEER} not found: no redis-full-check baseline")
    missed = [what for what, k in planted if k not in found]
    print(f"replica-audit missed: {', '.join(missed) or 'nothing'}")
    reached = audit_s < TARGETS["total"] and keys >= 1_000_000
    print(
        f"target: the 1M-key pair in < {TARGETS['total']:g} s: {audit_s:.1f} s at {keys:,} keys, reached "
        f"{'yes' if reached else 'no'}"
    )
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"peak RSS: this process {own:,.0f} MB, replica-audit run {audit_rss:,.0f} MB "
        f"(its Spark JVM is a grandchild: {peak_rss_mb(children=True):,.0f} MB is the largest waited-for child)"
    )


if __name__ == "__main__":
    main()
