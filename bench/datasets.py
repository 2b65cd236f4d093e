"""Shared bench data: the end-to-end key mix, planted differences, replica sync, peak RSS.

The mix (issue 12's end-to-end pair): 70% strings of 16-200 bytes, the rest hashes, lists, sets and
zsets of 5-50 elements (equal shares), 20% of keys with a TTL of 1-2 hours.
"""

from __future__ import annotations

import random
import resource
import time

import redis
from hiredis import ReplyError

from audit.sources.redis.resp import Command, RespPipe

PLANTED = (
    "missing_on_replica",
    "extra_on_replica",
    "string value",
    "hash field",
    "list element",
    "set member",
    "zset score",
    "type",
    "ttl",
    "second string value",
)


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident set size of this process (or of its waited-for children), in MB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024


def load_mix(client: redis.Redis, n: int, *, seed: int = 1, plant: bool = False) -> tuple[float, list[bytes]]:
    """Write `n` keys of the mix through pipelined batches; returns (seconds, some key of each type)."""
    rnd = random.Random(seed)
    blob = rnd.randbytes(1 << 20)

    def val(lo: int, hi: int) -> bytes:
        size = rnd.randint(lo, hi)
        off = rnd.randrange(len(blob) - size)
        return blob[off : off + size]

    pipe, started = RespPipe(client), time.time()
    cmds: list[Command] = []
    samples: dict[bytes, bytes] = {}

    def flush() -> None:
        bad = [r for r in pipe.execute(cmds) if isinstance(r, ReplyError)]
        if bad:
            raise RuntimeError(f"load failed: {bad[0]}")
        cmds.clear()

    for i in range(n):
        r = rnd.random()
        elems = range(rnd.randint(5, 50))
        if r < 0.7:
            kind, key = b"string", b"str:%d" % i
            cmds.append((b"SET", key, val(16, 200)))
        elif r < 0.775:
            kind, key = b"hash", b"hash:%d" % i
            cmds.append((b"HSET", key, *[x for j in elems for x in (b"f%d" % j, val(5, 40))]))
        elif r < 0.85:
            kind, key = b"list", b"list:%d" % i
            cmds.append((b"RPUSH", key, *[val(5, 40) for _ in elems]))
        elif r < 0.925:
            kind, key = b"set", b"set:%d" % i
            cmds.append((b"SADD", key, *[b"m%d:%b" % (j, val(4, 20)) for j in elems]))
        else:
            kind, key = b"zset", b"zset:%d" % i
            cmds.append((b"ZADD", key, *[x for j in elems for x in (b"%d" % rnd.randint(0, 10**6), b"m%d" % j)]))
        if rnd.random() < 0.2:
            cmds.append((b"PEXPIRE", key, b"%d" % rnd.randint(3_600_000, 7_200_000)))
        samples.setdefault(kind, key)
        if len(cmds) >= 20_000:
            flush()
    flush()
    pipe.close()
    return time.time() - started, list(samples.values())


def plant_differences(replica: redis.Redis, n: int) -> list[tuple[str, bytes]]:
    """Ten differences written on a writable replica (replica-read-only no): (what, key) for each.

    Keys are picked by index from the load's naming; each kind is looked for among the first keys.
    """
    replica.config_set("replica-read-only", "no")
    by_type: dict[str, list[bytes]] = {}
    for i in range(min(n, 5000)):
        for prefix in ("str", "hash", "list", "set", "zset"):
            k = b"%s:%d" % (prefix.encode(), i)
            if replica.exists(k):
                by_type.setdefault(prefix, []).append(k)
    s = by_type["str"]
    out = [
        ("missing_on_replica", s[0]),
        ("extra_on_replica", b"planted:extra"),
        ("string value", s[1]),
        ("hash field", by_type["hash"][0]),
        ("list element", by_type["list"][0]),
        ("set member", by_type["set"][0]),
        ("zset score", by_type["zset"][0]),
        ("type", s[2]),
        ("ttl", s[3]),
        ("second string value", s[4]),
    ]
    replica.delete(s[0])
    replica.set(b"planted:extra", b"only on the replica")
    replica.set(s[1], b"changed on the replica")
    replica.hset(by_type["hash"][0], b"f0", b"changed")
    replica.lset(by_type["list"][0], 0, b"changed")
    replica.sadd(by_type["set"][0], b"planted member")
    member = replica.zrange(by_type["zset"][0], 0, 0)[0]
    replica.zincrby(by_type["zset"][0], 1.5, member)
    replica.delete(s[2])
    replica.rpush(s[2], b"now a list")
    replica.pexpire(s[3], 600_000) if replica.pttl(s[3]) < 0 else replica.persist(s[3])
    replica.append(s[4], b"+")
    return out


def wait_replica_synced(master: redis.Redis, replica: redis.Redis, timeout_s: float = 300) -> None:
    """Until the replica's link is up, its offset equals the master's, and both hold as many keys."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        info = replica.info("replication")
        if (
            info.get("master_link_status") == "up"
            and info.get("slave_repl_offset") == master.info("replication").get("master_repl_offset")
            and master.dbsize() == replica.dbsize()
        ):
            return
        time.sleep(0.2)
    raise RuntimeError("replica did not sync in time")
