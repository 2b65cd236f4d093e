"""RocketMQ commit-log parse throughput on one core next to a plain read of the same bytes; then a Spark diff.

    .venv/bin/python bench/rmq_commitlog_bench.py [--mib 256] [--bodies 32,1024] [--diff-gib 0.25]
                                                  [--file-mib 1024] [--cache DIR] [--no-diff]

Parse: for each body size, a commit-log file of --mib MiB of records (topic, UNIQ_KEY, KEYS, TAGS as a
Java producer sets them; generated with the byte-exact writer, cached across runs) is read three ways
on one core: (a) a plain read of the file (readinto, page cache), (b) the plain read plus xxh3 over
every byte (the chunk-hash pass), (c) `parse_file`: every record walked, checked (length formula, body
CRC, PHYSICALOFFSET), decoded into Arrow columns with its digest. Target: (c) >= 100 MB/s per core.

Diff: a master store of --diff-gib GiB (--file-mib files) and a slave that is its byte copy cut mid-record
(a healthy pair: every byte is still parsed on both sides, and one chunk is compared record by record),
diffed by `diff_stores` on the local Spark. The issue's size is ``--diff-gib 2``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import time
import zlib
from pathlib import Path

import xxhash

from audit.diff.spark import configure, get_spark
from audit.local.rocketmq_commitlog import Message, blank_record, encode
from audit.sources.rocketmq.diff import diff_stores
from audit.sources.rocketmq.format import offset_to_file_name
from audit.sources.rocketmq.store import commitlog_files, parse_file

TARGET_MB_S = 100.0
T0 = 1_700_000_000_000
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


def template(body_size: int) -> tuple[bytes, int, int, int]:
    """One encoded record and where its UNIQ_KEY digits and body counter sit (patched per record)."""
    msg = Message(
        topic="TopicTest",
        body=b"0" * 16 + b"x" * max(body_size - 16, 0),
        properties={"UNIQ_KEY": "AC1100010000" + "0" * 20, "KEYS": "order-00000000", "TAGS": "TagA", "WAIT": "true"},
        born_ts=T0,
        born_host="10.0.0.7:50123",
        store_ts=T0,
        store_host="10.0.0.1:10911",
    )
    rec = encode(msg, 0)
    uniq_at = rec.rindex(b"AC1100010000") + 12
    body_at = rec.index(b"0" * 16)
    return rec, uniq_at, body_at, body_at + len(msg.body)


def generate(store: Path, total: int, body_size: int, file_size: int) -> int:
    """Write a commit log of about `total` bytes (rollover with BLANK, zero tail); returns its record count."""
    rec, uniq_at, body_at, body_end = template(body_size)
    size = len(rec)
    (store / "commitlog").mkdir(parents=True, exist_ok=True)
    offset = n = 0
    while offset < total:
        start = offset - offset % file_size
        buf = bytearray(file_size)
        pos = offset - start
        while offset < total:
            if size + 8 > file_size - pos:
                buf[pos : pos + 8] = blank_record(file_size - pos)
                offset = start + file_size
                break
            buf[pos : pos + size] = rec
            counter = b"%016d" % n
            buf[pos + body_at : pos + body_at + 16] = counter
            buf[pos + uniq_at : pos + uniq_at + 20] = b"%020X" % n
            _I.pack_into(buf, pos + 8, zlib.crc32(memoryview(buf)[pos + body_at : pos + body_end]) & 0x7FFFFFFF)
            _Q.pack_into(buf, pos + 20, n)  # QUEUEOFFSET
            _Q.pack_into(buf, pos + 28, offset)  # PHYSICALOFFSET
            _Q.pack_into(buf, pos + 40, T0 + n)  # BORNTIMESTAMP
            _Q.pack_into(buf, pos + 56, T0 + n + 1)  # STORETIMESTAMP
            pos += size
            offset += size
            n += 1
        (store / "commitlog" / offset_to_file_name(start)).write_bytes(bytes(buf))
    return n


def cached_store(cache: Path, name: str, total: int, body_size: int, file_size: int) -> tuple[Path, int]:
    store = cache / name
    marker = store / "records"
    if not marker.exists():
        shutil.rmtree(store, ignore_errors=True)
        t = time.perf_counter()
        n = generate(store, total, body_size, file_size)
        marker.write_text(str(n))
        print(f"  generated {name}: {n:,} records in {time.perf_counter() - t:.1f} s")
    return store, int(marker.read_text())


def plain_read(path: Path, hash_it: bool) -> float:
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    t = time.perf_counter()
    with path.open("rb", buffering=0) as fh:
        while (n := fh.readinto(buf)) > 0:
            if hash_it:
                xxhash.xxh3_64_intdigest(view[:n])
    return time.perf_counter() - t


def parse(path: Path) -> tuple[float, int]:
    t = time.perf_counter()
    rows = sum(b.num_rows for b in parse_file(path))
    return time.perf_counter() - t, rows


def best(fn, reps: int = 3):  # type: ignore[no-untyped-def]
    return min((fn() for _ in range(reps)), key=lambda r: r if isinstance(r, float) else r[0])


def bench_parse(cache: Path, mib: int, bodies: list[int]) -> None:
    print(f"\nparse, one core, {mib} MiB file per record size (best of 3, page cache warm)")
    print(
        f"{'body':>6} {'record':>7} {'records':>10} {'read MB/s':>10} {'read+xxh3':>10} {'parse MB/s':>11} "
        f"{'us/record':>10} {'vs read':>8}  target"
    )
    for body in bodies:
        store, n = cached_store(cache, f"parse-{mib}m-b{body}", mib << 20, body, (mib << 20) + (1 << 20))
        (f,) = commitlog_files(store)
        size = f.path.stat().st_size
        plain_read(f.path, False)  # warm the page cache
        read_s = best(lambda f=f: plain_read(f.path, False))
        hash_s = best(lambda f=f: plain_read(f.path, True))
        parse_s, rows = best(lambda f=f: parse(f.path))
        data = mib << 20  # the bytes holding records (the file's zero tail is checked, not parsed)
        mb_s = data / parse_s / 1e6
        print(
            f"{body:>6} {len(template(body)[0]):>7} {rows:>10,} {size / read_s / 1e6:>10,.0f} "
            f"{size / hash_s / 1e6:>10,.0f} {mb_s:>11,.1f} {parse_s / max(rows, 1) * 1e6:>10.2f} "
            f"{read_s / parse_s:>7.3f}x  {'ok' if mb_s >= TARGET_MB_S else 'MISSED'} (>= {TARGET_MB_S:.0f} MB/s)"
        )
        assert rows == n, (rows, n)


def bench_diff(cache: Path, gib: float, file_mib: int, body: int) -> None:
    total = int(gib * (1 << 30))
    master, n = cached_store(cache, f"diff-{gib}g-f{file_mib}m-b{body}", total, body, file_mib << 20)
    slave = cache / f"diff-{gib}g-f{file_mib}m-b{body}-slave"
    files = commitlog_files(master)
    if not (slave / "ok").exists():
        shutil.rmtree(slave, ignore_errors=True)
        (slave / "commitlog").mkdir(parents=True)
        for f in files:
            shutil.copyfile(f.path, slave / "commitlog" / f.path.name)
        last = slave / "commitlog" / files[-1].path.name
        data = bytearray(last.read_bytes())
        end = data.rstrip(b"\0")
        cut = len(end) - 100  # an HA chunk boundary inside the last record
        data[cut:] = bytes(len(data) - cut)
        last.write_bytes(bytes(data))
        (slave / "ok").write_text("1")
    size = sum(f.path.stat().st_size for f in files)
    spark = get_spark()
    spark.range(1000).selectExpr("id % 7 AS k").distinct().count()  # JVM start and warm-up, untimed
    t = time.perf_counter()
    result = diff_stores(spark, files, commitlog_files(slave))
    rows = result.findings.collect()
    secs = time.perf_counter() - t
    result.release()
    m = result.metrics
    print(
        f"\ndiff of two {gib:g} GiB stores ({len(files)} files of {file_mib} MiB, {n:,} records each side, "
        f"Spark {spark.conf.get('spark.master')})"
    )
    print(
        f"  {secs:.1f} s, {2 * size / secs / 1e6:,.0f} MB/s over both sides; findings: "
        f"{sorted((r.category, r.start_num) for r in rows)}"
    )
    print(
        f"  chunks equal/different {m['chunks_equal']}/{m['chunks_different']}, records compared "
        f"{m['master_records_compared']}/{m['replica_records_compared']}, bytes compared {m['bytes_compared']:,}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="MiB of records per parse-bench file")
    ap.add_argument("--bodies", default="32,1024", help="body sizes to bench the parse with (comma-separated)")
    ap.add_argument("--diff-gib", type=float, default=0.25, help="GiB per store for the diff (the issue: 2)")
    ap.add_argument("--file-mib", type=int, default=1024, help="commit-log file size of the diff stores")
    ap.add_argument("--diff-body", type=int, default=512)
    ap.add_argument("--no-diff", action="store_true")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "rmq-bench-cache")
    ap.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark setting (repeatable)")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    print(f"cache: {args.cache} (delete it to regenerate); cores: {os.cpu_count()}")
    bench_parse(args.cache, args.mib, [int(b) for b in args.bodies.split(",")])
    if not args.no_diff:
        configure(conf=dict(c.split("=", 1) for c in args.conf))
        bench_diff(args.cache, args.diff_gib, args.file_mib, args.diff_body)


if __name__ == "__main__":
    main()
