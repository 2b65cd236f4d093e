"""Damaged or hostile input costs at most a bounded factor more per MB than healthy input, for both readers.

Each shape is timed (process CPU time, best of 3) against healthy data of the same size scanned in the
same run, so the bound is a ratio that machine speed and load cancel out of; it catches a scan that goes
quadratic (re-reading, re-searching) on some damage, not a few percent. The absolute speed is the
benches' business (bench/pika_binlog_bench.py, bench/rmq_commitlog_bench.py).
"""

from __future__ import annotations

import functools
import random
import struct
import time
from collections.abc import Callable

import pytest

from audit.local.pika_binlog import padding_item, physical_header, raw_item
from audit.local.rocketmq_commitlog import Message, encode
from audit.sources.pika.binlog import scan_binlog
from audit.sources.pika.binlog_format import BLOCK_SIZE
from audit.sources.rocketmq.scan import scan_commitlog

SIZE = 1 << 20
RATIO = 25.0  # the worst shapes below are per-record Python work on tiny records: ~5-10x


def _cpu(scan: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        scan()
        best = min(best, time.process_time() - t)
    return max(best, 1e-3)


def _records(make: Callable[[int, int], bytes]) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < SIZE:
        out += make(i, len(out))
        i += 1
    return bytes(out)


# -- RocketMQ -------------------------------------------------------------------------------------------------


def _rmq(i: int, at: int, **kw: object) -> bytes:
    m = Message(topic="TopicTest", body=b"x" * 150, properties={"UNIQ_KEY": f"U{i:020d}", "KEYS": "k", "TAGS": "t"})
    return encode(m.but(**kw), at)


@functools.cache
def _rmq_shapes() -> dict[str, bytes]:
    rnd = random.Random(3)
    return {
        "tiny records": _records(lambda i, at: encode(Message(topic="T"), at)),
        "every host IPv6": _records(
            lambda i, at: _rmq(i, at, born_host=f"[2001:db8::{i % 65536:x}]:1", store_host="[::1]:2")
        ),
        "every topic not UTF-8": _records(_not_utf8_topic),
        "properties all separators": _records(lambda i, at: _rmq(i, at, properties={"K" * 50: "\x01" * 200})),
        "random bytes": rnd.randbytes(SIZE),
        "a bad CRC in the first record": (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:])(_records(_rmq)),
    }


def _not_utf8_topic(i: int, at: int) -> bytes:
    raw = _rmq(i, at, topic="TopicTestX")
    return raw.replace(b"TopicTestX", b"Topic\xff\xfe\xfd\xfc\xfb", 1)


@pytest.fixture(scope="module")
def rmq_healthy_cpu() -> float:
    data = _records(_rmq)
    return _cpu(lambda: scan_commitlog(data, file_start=0)) / len(data)


@pytest.mark.parametrize("shape", list(_rmq_shapes()))
def test_rocketmq_damage_costs_a_bounded_factor_per_mb(shape: str, rmq_healthy_cpu: float) -> None:
    data = _rmq_shapes()[shape]
    per_byte = _cpu(lambda: scan_commitlog(data, file_start=0)) / len(data)
    print(f"{shape}: {per_byte / rmq_healthy_cpu:.1f}x healthy")
    assert per_byte <= RATIO * rmq_healthy_cpu, f"{shape}: {per_byte / rmq_healthy_cpu:.1f}x healthy"


# -- Pika -----------------------------------------------------------------------------------------------------


def _framed(items: list[bytes]) -> bytes:
    """Items as Full records, each kept inside its block (the rest of a block zero-filled)."""
    out = bytearray()
    for item in items:
        rec = physical_header(len(item), 1, 1) + item
        if len(out) % BLOCK_SIZE + len(rec) > BLOCK_SIZE:
            out += bytes(BLOCK_SIZE - len(out) % BLOCK_SIZE)
        out += rec
    return bytes(out)


def _pika_healthy() -> bytes:
    return _framed([raw_item([b"SET", b"key:%d" % i, b"v" * 150], 1, 0, i, 0, 0) for i in range(SIZE // 200)])


@functools.cache
def _pika_shapes() -> dict[str, bytes]:
    rnd = random.Random(4)
    healthy = _pika_healthy()
    garbage_headers = bytearray(healthy)
    for block in range(0, len(garbage_headers), BLOCK_SIZE):
        garbage_headers[block : block + 8] = struct.pack("<HBIB", 65000, 0, 1, 9)
    zero_gaps = bytearray(healthy)
    for block in range(BLOCK_SIZE // 2, len(zero_gaps), BLOCK_SIZE):
        at = next(r for r in range(block, block + 300) if zero_gaps[r + 7] == 1 and zero_gaps[r + 8] == 1)
        zero_gaps[at : at + 8] = bytes(8)
    return {
        "tiny records": _framed([raw_item([b"A"], 1, 0, i, 0, 0) for i in range(SIZE // 50)]),
        "hundred-argument commands": _framed(
            [raw_item([b"SADD", b"k%d" % i, *[b"m"] * 100], 1, 0, i, 0, 0) for i in range(SIZE // 900)]
        ),
        "every argument count wrong": _framed(
            [
                raw_item([b"SET", b"k%d" % i, b"v" * 150], 1, 0, i, 0, 0).replace(b"*3", b"*9", 1)
                for i in range(SIZE // 200)
            ]
        ),
        "damage in every block": bytes(garbage_headers),
        "a zeroed header in every block": bytes(zero_gaps),
        "padding commands": _framed([padding_item(200) for _ in range(SIZE // 210)]),
        "random bytes": rnd.randbytes(SIZE),
    }


@pytest.fixture(scope="module")
def pika_healthy_cpu() -> float:
    data = _pika_healthy()
    return _cpu(lambda: scan_binlog(data, db=0, filenum=0)) / len(data)


@pytest.mark.parametrize("shape", list(_pika_shapes()))
def test_pika_damage_costs_a_bounded_factor_per_mb(shape: str, pika_healthy_cpu: float) -> None:
    data = _pika_shapes()[shape]
    per_byte = _cpu(lambda: scan_binlog(data, db=0, filenum=0)) / len(data)
    print(f"{shape}: {per_byte / pika_healthy_cpu:.1f}x healthy")
    assert per_byte <= RATIO * pika_healthy_cpu, f"{shape}: {per_byte / pika_healthy_cpu:.1f}x healthy"
