"""Judging a key written all the time: the master's value bracketed around the replica's position.

A healthy replica at replication offset R holds exactly what the master held at offset R. The recheck
cannot read the master "at R", but it can read a key together with the server's offset in one pipeline
(``INFO replication``, the key's reads, ``INFO replication`` again: a server executes one client's
pipeline without applying anything else in between, which the two equal offsets confirm). Reading the
master like that again and again, and the replica once in between, gives master samples at offsets
M_a <= R <= M_b; if the key held the same value at M_a and at M_b, that is its value at R, and the
replica must hold it. A difference is then a divergence, however often the key is written; samples that
do not bracket R with one value are simply taken again, until a deadline.

What this cannot tell: a key written to a value and back within one bracket (a few hundred microseconds)
while the replica's offset fell in between; the replica then holds the passing value, and is judged
divergent. The recheck's rounds have the same blind spot over a whole round, which is why a round's
suspects come here (audit/sources/redis/recheck.py). Keys larger than one page are left to the paged
reader (one pipeline must read the whole value).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from hiredis import ReplyError

from audit.pacing import Pacer
from audit.sources.redis.ack import same_stream
from audit.sources.redis.digest import OrderedDigest, UnorderedDigest
from audit.sources.redis.info import as_int, parse_info
from audit.sources.redis.keys import KeyState, expiries_differ
from audit.sources.redis.resp import Command, RespPipe

Key = tuple[int, bytes]

Value = tuple[str, int, str, int | None] | None
"""(type, length, digest, absolute expiry in ms or None) of a key, or None when it does not exist."""

_FULL_READ: dict[str, tuple[bytes, ...]] = {
    "string": (b"GET",),
    "hash": (b"HGETALL",),
    "list": (b"LRANGE", b"0", b"-1"),
    "set": (b"SMEMBERS",),
    "zset": (b"ZRANGE", b"0", b"-1", b"WITHSCORES"),
    "stream": (b"XRANGE", b"-", b"+"),
}


@dataclass(frozen=True, slots=True)
class Sample:
    offset: int
    value: Value
    replid: str | None = None
    """the replication stream `offset` counts in (a replica shares its master's `master_replid`)"""


def _digest(type_: str, reply: Any) -> tuple[int, str]:
    if type_ == "string":
        o = OrderedDigest(type_)
        o.add_bytes(reply)
        return len(reply), o.hexdigest()
    if type_ in ("hash", "set", "zset"):
        u = UnorderedDigest(type_)
        {"hash": u.add_hash_page, "set": u.add_set_page, "zset": u.add_zset_page}[type_](reply)
        return u.count, u.hexdigest()
    o = OrderedDigest(type_)
    (o.add_elements if type_ == "list" else o.add_stream_entries)(reply)
    return o.count, o.hexdigest()


def read_at_offset(pipe: RespPipe, key: bytes, type_: str, offset_field: str) -> Sample | None:
    """The key's value with the server's replication offset, or None if the read was not atomic."""
    info: Command = (b"INFO", b"replication")
    read = (*_FULL_READ[type_][:1], key, *_FULL_READ[type_][1:])
    started = time.time()
    first, kind, pttl, value, last = pipe.execute([info, (b"TYPE", key), (b"PTTL", key), read, info])
    read_at = int((started + time.time()) * 500)  # midpoint, in ms
    stated = parse_info(first)
    before, after = as_int(stated.get(offset_field)), as_int(parse_info(last).get(offset_field))
    if before is None or before != after or isinstance(kind, ReplyError):
        return None
    replid = str(stated["master_replid"]) if stated.get("master_replid") is not None else None
    if kind == b"none":
        return Sample(before, None, replid)
    if kind.decode() != type_ or isinstance(value, ReplyError):
        return Sample(before, (kind.decode(), -1, "", None), replid)  # another type now: a value all the same
    length, digest = _digest(type_, value)
    expire_at = read_at + pttl if isinstance(pttl, int) and pttl >= 0 else None
    return Sample(before, (type_, length, digest, expire_at), replid)


def same_value(a: Value, b: Value, tolerance_ms: int) -> bool:
    """One value: type, length and digest equal, and the expiry on both or neither, within the tolerance
    (absolute expiry times from two reads differ by the reads' clock skew, as in the diff)."""
    if a is None or b is None:
        return a is b
    return a[:3] == b[:3] and not expiries_differ(a[3], b[3], tolerance_ms)


def bracket(samples: list[Sample], replica: Sample, tolerance_ms: int) -> tuple[bool | None, Sample | None]:
    """Whether the replica's value is the master's at its offset, and the master sample that says so
    (None, None: no two samples around the replica's offset with one value, yet). Only samples of the
    replica's own replication stream count: an offset of another stream is no position in this one."""
    samples = [s for s in samples if same_stream(s.replid, replica.replid)]
    for a, b in pairwise(samples):
        if a.offset <= replica.offset <= b.offset and same_value(a.value, b.value, tolerance_ms):
            return same_value(replica.value, a.value, tolerance_ms), a
    exact = [s for s in samples if s.offset == replica.offset]
    return (same_value(replica.value, exact[0].value, tolerance_ms), exact[0]) if exact else (None, None)


@dataclass(frozen=True, slots=True)
class Verdict:
    agrees: bool
    master: Value
    replica: Value
    offset: int


def judge(
    master: RespPipe,
    replica: RespPipe,
    db: int,
    key: bytes,
    type_: str,
    timeout_s: float,
    paced: tuple[Pacer | None, Pacer | None] = (None, None),
    *,
    tolerance_ms: int,
) -> Verdict | None:
    """Whether the replica holds the master's value at the replica's own offset; None if not decided in time.

    `paced`: each side's reads held to its max_keys_per_s (a read of the key counts one), as every read
    of the audit is; without a cap the loop reads as fast as the servers answer, for at most `timeout_s`.
    `tolerance_ms`: the pair's ttl_tolerance_ms, as the diff compares expiry times."""
    if type_ not in _FULL_READ:
        return None
    for pipe in (master, replica):
        pipe.select(db)
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout_s
    m_pacer, r_pacer = paced
    while time.monotonic() < deadline:
        if m_pacer is not None:
            m_pacer.before_batch(1)
        m = read_at_offset(master, key, type_, "master_repl_offset")
        if m is not None:
            samples.append(m)
            samples = samples[-4096:]
        if r_pacer is not None:
            r_pacer.before_batch(1)
        r = read_at_offset(replica, key, type_, "slave_repl_offset")
        if r is not None and samples:
            agrees, at = bracket(samples, r, tolerance_ms)
            if agrees is not None and at is not None:
                return Verdict(agrees, at.value, r.value, r.offset)
    return None


def fits_one_read(state: KeyState | None, page: int, window_bytes: int) -> bool:
    """Whether the judge may read the key whole in one command: one page of elements, or one window of
    a string (absent: nothing to read). A bigger key read whole, again and again, would block the
    server and hold the value in memory: it is left to the recheck's rounds."""
    if state is None:
        return True
    return state.length <= (window_bytes if state.type == "string" else page)


def judge_keys(
    keys: dict[Key, str],
    pipes: tuple[RespPipe, RespPipe],
    budget_s: float,
    tolerance_ms: int,
    paced: tuple[Pacer | None, Pacer | None] = (None, None),
) -> dict[Key, Verdict]:
    """Each key, read as the type given, judged in turn (at most 1 s a key) until `budget_s` is spent;
    a key the judge could not decide in its time has no verdict."""
    verdicts: dict[Key, Verdict] = {}
    deadline = time.monotonic() + budget_s
    for (db, key), type_ in keys.items():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        verdict = judge(*pipes, db, key, type_, min(remaining, 1.0), paced, tolerance_ms=tolerance_ms)
        if verdict is not None:
            verdicts[(db, key)] = verdict
    return verdicts


def as_state(key: bytes, value: Value) -> KeyState | None:
    """A judged value as the state the diff's rule classifies."""
    if value is None:
        return None
    type_, length, digest, expire_at = value
    now = int(time.time() * 1000)
    ttl = None if expire_at is None else max(expire_at - now, 0)
    return KeyState(key, type_, ttl, expire_at, length, digest, "ok", None, now)
