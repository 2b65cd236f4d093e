"""An oracle for the Redis keyspace audit, independent of it: random keyspaces, random divergences planted
on a replica made writable, random writes on a master, and what the findings must be from both sides read
whole with redis-py, in plain Python.

The keyspace mixes every type the audit reads (strings from empty to 70 KB, binary and non-UTF-8 key names;
hashes, lists, sets of integers or strings, zsets with infinite and equal scores, streams) at sizes on
either side of a page and of the servers' listpack and intset limits, a quarter of them with a TTL. The
oracle compares what the audit compares: presence, type, the whole value (a stream by its entries) and
the absolute expiry within the tolerance; its categories in the audit's order (missing, extra, type,
value, TTL).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

TTL_TOLERANCE_MS = 2000
ODD_ENCODINGS = [
    "--hash-max-listpack-entries",
    "1",
    "--set-max-intset-entries",
    "2",
    "--zset-max-listpack-entries",
    "0",
    "--list-max-listpack-size",
    "1",
]
"""A replica keeping every collection in its big encoding: the same content must digest the same."""
SCORES = [0, 1, 1.5, 0.1, -3, 1e300, float("inf"), float("-inf")]


def key_name(rnd: random.Random, i: int) -> bytes:
    c = rnd.random()
    if c < 0.1:
        return b"bin\x00\xff\n " + rnd.randbytes(4) + b"%d" % i
    if c < 0.2:
        return f"ключ:{i}:ü".encode()
    if c < 0.25:
        return b"%d" % i
    return b"k:%d" % i


def value(rnd: random.Random) -> bytes:
    c = rnd.random()
    if c < 0.1:
        return b""
    if c < 0.2:
        return b"%d" % rnd.randrange(-(10**6), 10**6)
    if c < 0.25:
        return rnd.randbytes(rnd.randrange(1, 40))
    if c < 0.28:
        return b"x" * rnd.randrange(3000, 70000)
    return b"v%d" % rnd.randrange(10**9)


def fill(c: redis.Redis, rnd: random.Random, n: int) -> list[bytes]:
    """`n` random keys in the client's db; their names."""
    keys = []
    for i in range(n):
        k, kind, size = key_name(rnd, i), rnd.choice("sssshlzxe"), rnd.choice([1, 2, 5, 49, 50, 51, 130, 600])
        if kind == "s":
            c.set(k, value(rnd))
        elif kind == "h":
            c.hset(
                k, mapping={(b"f%d" % j if rnd.random() < 0.9 else value(rnd) or b"e"): value(rnd) for j in range(size)}
            )
        elif kind == "l":
            c.rpush(k, *[value(rnd) for _ in range(size)])
        elif kind == "z":
            c.zadd(k, {b"m%d" % j: rnd.choice([*SCORES, rnd.random()]) for j in range(size)})
        elif kind == "x":
            for j in range(min(size, 60)):
                c.xadd(k, {b"f": value(rnd), b"g%d" % j: b"1"})
        else:
            ints = rnd.random() < 0.5
            c.sadd(k, *[rnd.randrange(10**6) if ints else value(rnd) or b"e" for _ in range(size)])
        if rnd.random() < 0.25:
            c.pexpire(k, rnd.randrange(3_600_000, 7_200_000))
        keys.append(k)
    return keys


def fill_big(c: redis.Redis, copies: int = 3) -> list[bytes]:
    """Collections of thousands of elements, read in many pages while the writers change them."""
    keys = []
    for j in range(copies):
        c.hset(b"bigh:%d" % j, mapping={b"f%d" % i: b"%d" % i for i in range(5000)})
        c.rpush(b"bigl:%d" % j, *range(5000))
        c.zadd(b"bigz:%d" % j, {b"m%d" % i: i for i in range(3000)})
        keys += [b"bigh:%d" % j, b"bigl:%d" % j, b"bigz:%d" % j]
    return keys


Read = tuple[str, Any, int | None]  # type, whole value, absolute expiry in ms (None: none)


def read_whole(c: redis.Redis) -> dict[bytes, Read]:
    """Every key of the client's db, read whole."""
    out: dict[bytes, Read] = {}
    for k in c.scan_iter(count=1000):
        kind = c.type(k).decode()
        if kind == "none":
            continue
        v = _whole_value(c, k, kind)
        pttl = c.pttl(k)
        out[k] = (kind, v, None if pttl < 0 else int(time.time() * 1000) + pttl)
    return out


def _whole_value(c: redis.Redis, k: bytes, kind: str) -> Any:
    if kind == "string":
        return c.get(k)
    if kind == "hash":
        return sorted(c.hgetall(k).items())
    if kind == "list":
        return c.lrange(k, 0, -1)
    if kind == "set":
        return sorted(c.smembers(k))
    if kind == "zset":
        return sorted(c.zrange(k, 0, -1, withscores=True, score_cast_func=bytes))
    return [(i, sorted(f.items())) for i, f in c.xrange(k)]  # a stream: its entries


def expected(master: dict[bytes, Read], replica: dict[bytes, Read], mode: str = "full") -> set[tuple[bytes, str]]:
    """(key, category) of every key the audit must report, as the pair's compare mode counts it (README:
    `full` type, value, TTL; `length` type, element count (a string's bytes), TTL; `keys` presence)."""
    out = set()
    for k in master.keys() | replica.keys():
        if k not in replica:
            out.add((k, "missing_on_replica"))
        elif k not in master:
            out.add((k, "extra_on_replica"))
        elif mode == "keys":
            continue
        elif master[k][0] != replica[k][0]:
            out.add((k, "type_mismatch"))
        elif master[k][1] != replica[k][1] and (mode == "full" or len(master[k][1]) != len(replica[k][1])):
            out.add((k, "value_mismatch"))
        else:
            m, r = master[k][2], replica[k][2]
            if (m is None) != (r is None) or (m is not None and r is not None and abs(m - r) > TTL_TOLERANCE_MS):
                out.add((k, "ttl_mismatch"))
    return out


def plant(
    r: redis.Redis, rnd: random.Random, keys: list[bytes], n: int, own: Callable[[int], bytes] | None = None
) -> None:
    """Up to `n` random changes to existing keys on a replica made writable, and a few keys of its own
    (named by `own`: a cluster node can only hold keys of its own slots)."""
    r.config_set("replica-read-only", "no")
    for k in rnd.sample(keys, min(n, len(keys))):
        op = rnd.random()
        if op < 0.15:
            r.delete(k)
        elif op < 0.25:
            r.delete(k)
            r.set(k, b"retyped")
        elif op < 0.4:  # within the tolerance or past it
            pttl = r.pttl(k)
            if pttl > 0:
                r.pexpire(k, pttl + rnd.choice([1000, 5000, 600_000]))
            elif rnd.random() < 0.5:
                r.pexpire(k, 5_000_000)
        elif op < 0.45:
            r.persist(k)
        else:
            _change_value(r, rnd, k, r.type(k).decode())
            if rnd.random() < 0.3:  # its TTL too: a mode that ignores the value still compares the TTL
                r.pexpire(k, 5_000_000)
    for i in range(rnd.randrange(0, 4)):
        r.set(own(i) if own else b"only-replica:%d" % i, b"x")


def _change_value(r: redis.Redis, rnd: random.Random, k: bytes, kind: str) -> None:
    """One small change inside the value: a byte, a field, two elements swapped, a score nudged."""
    if kind == "string":
        r.append(k, b"!") if rnd.random() < 0.5 else r.setrange(k, 0, b"\x00")
    elif kind == "hash":
        f = rnd.choice(r.hkeys(k))
        r.hset(k, f, (r.hget(k, f) or b"") + b"?") if rnd.random() < 0.5 else r.hdel(k, f)
    elif kind == "list":
        first, last = r.lindex(k, 0), r.lindex(k, -1)
        if r.llen(k) > 1 and first != last and rnd.random() < 0.5:
            r.lset(k, 0, last)
            r.lset(k, -1, first)
        else:
            r.lset(k, rnd.randrange(r.llen(k)), b"changed")
    elif kind == "set":
        r.srem(k, r.srandmember(k)) if rnd.random() < 0.5 else r.sadd(k, b"new-member")
    elif kind == "zset":
        member = r.zrandmember(k)
        score = r.zscore(k, member) or 0.0
        r.zadd(k, {member: 0.0 if score in (float("inf"), float("-inf")) else score + rnd.choice([1, 1e-9])})
    elif kind == "stream":
        r.xadd(k, {b"extra": b"1"})


def write_randomly(
    c: redis.Redis | redis.RedisCluster, seed: int, keys: list[bytes], stop: threading.Event
) -> tuple[int, int]:
    """Random writes to `keys` and new ones until `stop`: every type's commands, TTLs set, removed and
    expiring within the audit, keys renamed onto others and replaced in a MULTI. (Writes done, refused.)
    Through a cluster client a key is renamed within its slot only, and a MULTI runs on the key's node."""
    rnd, done, refused = random.Random(seed), 0, 0
    while not stop.is_set():
        k = rnd.choice(keys) if keys and rnd.random() < 0.8 else b"new:%d" % rnd.randrange(300)
        try:
            _write(c, rnd, k)
            done += 1
        except redis.ResponseError:  # WRONGTYPE, no such key, index out of range: the writes still vary
            refused += 1
        if rnd.random() < 0.3:
            time.sleep(0.0005)
    return done, refused


def same_slot_name(k: bytes, n: int) -> bytes | None:
    """Another key name in `k`'s cluster slot (a hash tag of what `k` hashes by), or None when that has a
    `}` (no tag can hold it)."""
    start = k.find(b"{")
    end = k.find(b"}", start + 1) if start >= 0 else -1
    hashed = k[start + 1 : end] if start >= 0 and end > start + 1 else k
    return None if b"}" in hashed or not hashed else b"{" + hashed + b"}:renamed:%d" % n


@contextmanager
def writing(
    jobs: Sequence[tuple[redis.Redis | redis.RedisCluster, int, list[bytes]]],
) -> Iterator[list[tuple[int, int]]]:
    """A thread of :func:`write_randomly` per (client, seed, keys) for the block; each one's (writes done,
    refused) in the list yielded, once the block has ended and the writers have stopped."""
    stop, writes = threading.Event(), []
    threads = [
        threading.Thread(target=lambda c=c, seed=seed, keys=keys: writes.append(write_randomly(c, seed, keys, stop)))
        for c, seed, keys in jobs
    ]
    for t in threads:
        t.start()
    try:
        yield writes
    finally:
        stop.set()
        for t in threads:
            t.join()


def _write(c: redis.Redis | redis.RedisCluster, rnd: random.Random, k: bytes) -> None:
    cluster = isinstance(c, redis.RedisCluster)
    op = rnd.random()
    if op < 0.1:
        c.set(k, value(rnd), keepttl=rnd.random() < 0.5)
    elif op < 0.2:
        c.hset(k, b"f%d" % rnd.randrange(6000), value(rnd) or b"z")
    elif op < 0.3:
        c.lpush(k, value(rnd)) if rnd.random() < 0.5 else c.rpop(k)
    elif op < 0.38:
        c.zincrby(k, rnd.choice([1, 0.5, -2]), b"m%d" % rnd.randrange(200))
    elif op < 0.45:
        c.sadd(k, rnd.randrange(10**6)) if rnd.random() < 0.5 else c.spop(k)
    elif op < 0.5:
        c.xadd(k, {b"a": value(rnd)}, maxlen=rnd.choice([None, 30]))
    elif op < 0.58:
        c.pexpire(k, rnd.randrange(1000, 9_000_000))
    elif op < 0.62:
        c.persist(k)
    elif op < 0.66:
        c.delete(k)
    elif op < 0.7:
        node = c.get_redis_connection(c.get_node_from_key(k)) if isinstance(c, redis.RedisCluster) else c
        p = node.pipeline(transaction=True)
        p.delete(k).rpush(k, b"a", b"b").pexpire(k, 500_000).execute()
    elif op < 0.73:
        target = same_slot_name(k, rnd.randrange(30)) if cluster else b"new:%d" % rnd.randrange(300)
        if target is not None:
            c.rename(k, target)
    elif op < 0.78:
        c.set(k, b"short", px=rnd.randrange(1, 300))
    elif op < 0.83:
        c.hdel(k, b"f%d" % rnd.randrange(6000))
    elif op < 0.88:
        c.lset(k, rnd.randrange(-5, 5), value(rnd) or b"q")
    elif op < 0.92:
        c.append(k, b"+")
    elif op < 0.96:
        c.srem(k, rnd.randrange(10**6))
    else:
        c.zrem(k, b"m%d" % rnd.randrange(200))
