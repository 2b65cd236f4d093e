"""Sample data for the demo and the tests: every Redis type, TTLs, binary keys, one big hash."""

from __future__ import annotations

import random
from dataclasses import dataclass

import redis

BIG_HASH = b"big:hash"


@dataclass(frozen=True)
class Planted:
    """One divergence planted on a replica, and the category the audit must report for it."""

    db: int
    key: bytes
    category: str


def load_sample(client: redis.Redis, n_keys: int = 100_000, big_hash_fields: int = 200_000, seed: int = 7) -> None:
    """About n_keys keys: 60% strings, then hashes, lists, sets, zsets, streams; 20% with a TTL; binary keys."""
    rnd = random.Random(seed)
    pipe = client.pipeline(transaction=False)
    for i in range(n_keys):
        kind = i % 10
        prefix = b"s" if kind < 6 else [b"h", b"l", b"z", b"x"][kind - 6]
        key = b"bin:\x00\xff%d" % i if i % 97 == 0 else b"%s:%d" % (prefix, i)
        if kind < 6:
            pipe.set(key, rnd.randbytes(rnd.randint(4, 60)))
        elif kind == 6:
            pipe.hset(key, mapping={b"f%d" % j: b"v%d" % rnd.randint(0, 999) for j in range(rnd.randint(1, 12))})
        elif kind == 7:
            pipe.rpush(key, *[b"e%d" % rnd.randint(0, 99) for _ in range(rnd.randint(1, 12))])
        elif kind == 8:
            if i % 20 == 8:
                pipe.sadd(key, *[b"m%d" % j for j in range(rnd.randint(1, 12))])
            else:
                pipe.zadd(key, {b"m%d" % j: rnd.random() * 100 for j in range(rnd.randint(1, 12))})
        else:
            pipe.xadd(key, {b"f": b"%d" % i}, id=b"%d-1" % (i + 1))
        if i % 5 == 0:
            pipe.pexpire(key, rnd.randint(3_600_000, 7_200_000))
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    fields = list(range(big_hash_fields))
    for start in range(0, big_hash_fields, 5000):
        client.hset(BIG_HASH, mapping={b"field:%d" % j: b"value:%d" % j for j in fields[start : start + 5000]})


def plant_divergences(replica: redis.Redis, db: int = 0) -> list[Planted]:
    """Write straight to a replica (made writable) so it diverges from its master in known ways."""
    replica.config_set("replica-read-only", "no")
    planted = [
        Planted(db, b"s:10", "missing_on_replica"),
        Planted(db, b"only:on:replica", "extra_on_replica"),
        Planted(db, b"s:21", "value_mismatch"),
        Planted(db, b"s:32", "type_mismatch"),
        Planted(db, b"s:40", "ttl_mismatch"),
        Planted(db, BIG_HASH, "value_mismatch"),
    ]
    replica.delete(b"s:10")
    replica.set(b"only:on:replica", b"surprise")
    replica.set(b"s:21", b"changed on the replica")
    replica.delete(b"s:32")
    replica.rpush(b"s:32", b"now a list")
    ttl = replica.pttl(b"s:40")  # sample data gives every 5th key a TTL of 1-2 hours
    replica.pexpire(b"s:40", int(ttl) + 10 * 60_000)
    replica.hset(BIG_HASH, b"field:123456", b"diverged")
    return planted
