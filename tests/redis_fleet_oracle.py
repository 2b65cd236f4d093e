"""What the fleet oracle tests share (tests/integration/test_redis_fleet_oracle.py and
test_redis_fleet_oracle_clusters.py): unreplicated planting, the slot map, random compare modes and key
filters, one audit through the CLI, and the findings as the oracle's sets."""

from __future__ import annotations

import fnmatch
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.local.redis_cluster import LocalCluster
from audit.local.redis_server import RedisServer
from audit.sources.redis.routing import key_slot
from tests import redis_oracle as oracle
from tests.integration.helpers import findings, latest_run, run_cli, write_inventory

KEY_CATEGORIES = {"missing_on_replica", "extra_on_replica", "type_mismatch", "value_mismatch", "ttl_mismatch"}
UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"
WRITES = {"DEL", "SET", "PEXPIRE", "PERSIST", "APPEND", "SETRANGE", "HSET", "HDEL", "LSET", "SREM", "SADD"}
WRITES |= {"ZADD", "XADD"}
ODD = dict(zip(oracle.ODD_ENCODINGS[::2], oracle.ODD_ENCODINGS[1::2], strict=True))
FAST = {"recheck_interval_s": 0.2, "recheck_rounds": 2, "recheck_ack_wait_s": 2}
PATTERNS = ["k:*", "k:1*", "*ü", "bin*", "k:[0-4]*", "*:2?", "only-*", "*5", "new*"]
"""Globs whose Redis meaning fnmatch shares (no `[^`, no escapes): the oracle filters with fnmatch."""


def seeds(default: list[int]) -> list[int]:
    spec = os.environ.get("REDIS_FLEET_ORACLE_SEEDS", "")
    if not spec:
        return default
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


class Unreplicated(redis.Redis):
    """A client of one node whose writes stay on it: each runs in a script that does not replicate."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if str(args[0]).upper() in WRITES:
            return super().execute_command("EVAL", UNREPLICATED, 0, *args, **options)
        return super().execute_command(*args, **options)


def readonly(server: RedisServer) -> redis.Redis:
    """A client of a cluster replica that may read its slots' keys (READONLY, on its only connection)."""
    c = redis.Redis(host="127.0.0.1", port=server.port, protocol=2, single_connection_client=True)
    c.execute_command("READONLY")
    return c


def owner(cluster: LocalCluster) -> dict[int, int]:
    """slot -> the index of the master serving it."""
    owner = {}
    for i, m in enumerate(cluster.masters):
        for line in cluster.node(m).execute_command("CLUSTER", "NODES").decode().splitlines():
            parts = line.split()
            if "myself" in parts[2]:
                for item in parts[8:]:
                    if not item.startswith("["):
                        a, _, b = item.partition("-")
                        owner.update(dict.fromkeys(range(int(a), int(b or a) + 1), i))
    return owner


def own_name(owner: dict[int, int], shard: int, i: int) -> bytes:
    """A key name (`only-master:<i>:<n>`) whose slot the shard serves."""
    n = 0
    while owner[key_slot(b"only-master:%d:%d" % (i, n))] != shard:
        n += 1
    return b"only-master:%d:%d" % (i, n)


Keep = Any  # bytes -> bool


def options(rnd: random.Random) -> tuple[dict[str, Any], Keep, str]:
    """A random compare mode and, for some seeds, a key filter: (the pair's fields, the keys it keeps, mode)."""
    mode = rnd.choice(["full", "full", "length", "keys"])
    include = rnd.sample(PATTERNS, rnd.choice([0, 0, 1, 2]))
    exclude = rnd.sample(PATTERNS, rnd.choice([0, 0, 1]))

    def keep(k: bytes) -> bool:
        hit = lambda ps: any(fnmatch.fnmatchcase(k, p.encode()) for p in ps)  # noqa: E731
        return (not include or hit(include)) and not hit(exclude)

    fields: dict[str, Any] = {"compare": mode}
    if include or exclude:
        fields["keys"] = {"include": include, "exclude": exclude}
    return fields, keep, mode


def want(master: dict[bytes, oracle.Read], replica: dict[bytes, oracle.Read], keep: Keep, mode: str) -> set[Any]:
    def kept(reads: dict[bytes, oracle.Read]) -> dict[bytes, oracle.Read]:
        return {k: v for k, v in reads.items() if keep(k)}

    return oracle.expected(kept(master), kept(replica), mode)


def run(tmp: Path, mp: pytest.MonkeyPatch, pair: dict[str, Any], rnd: random.Random) -> tuple[int, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    # pages of 10 or 50 elements: most collections are read in several pages, some in one
    inv = write_inventory(tmp / "inv.json", [pair], big_key_elements=rnd.choice([10, 50, 10_000]), **FAST)
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp / "out"), "--quiet"], mp)
    return code, latest_run(tmp / "out")


def got(root: Path) -> set[tuple[Any, ...]]:
    """(db, key, category, replica) of every key finding (the replica's address in a replication audit)."""
    out = set()
    for f in findings(root):
        if f["category"] in KEY_CATEGORIES:
            replica = json.loads(f["detail"] or "{}").get("replica_node")  # a migration's: None
            out.add((f["db"], bytes(f["key"]), f["category"], replica if isinstance(replica, str) else None))
    return out


def assert_same(want: set[tuple[Any, ...]], got: set[tuple[Any, ...]]) -> None:
    assert (sorted(want - got), sorted(got - want)) == ([], []), "(only the oracle's, only the audit's)"


def addr(server: RedisServer) -> str:
    return f"127.0.0.1:{server.port}"
