"""Field-level differences on real servers: planted on the master only (EVAL with REPL_NONE)."""

from __future__ import annotations

import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from audit.local.redis_server import RedisServer, free_port, wait_in_sync, wait_link_up
from audit.sources.redis.display import unquote
from audit.sources.redis.fields import field_diff
from audit.sources.redis.resp import RespPipe

pytestmark = pytest.mark.integration

UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, RedisServer]]:
    root = Path(tmp_path_factory.mktemp("fields"))
    master = RedisServer(free_port(), root / "m", ["--repl-diskless-sync-delay", "0"]).start()
    replica = RedisServer(free_port(), root / "r", ["--replicaof", "127.0.0.1", str(master.port)]).start()
    wait_link_up(replica)
    yield master, replica
    replica.stop()
    master.stop()


@pytest.fixture()
def pipes(pair: tuple[RedisServer, RedisServer]) -> Iterator[tuple[RespPipe, RespPipe]]:
    m, r = RespPipe(pair[0].client()), RespPipe(pair[1].client())
    yield m, r
    m.close()
    r.close()


def plant(master: redis.Redis, *command: object) -> None:
    """Run a write on the master that does not reach the replica."""
    master.eval(UNREPLICATED, 0, *command)


def load(pair: tuple[RedisServer, RedisServer], fill: dict[bytes, object]) -> None:
    m = pair[0].client()
    p = m.pipeline(transaction=False)
    for key, value in fill.items():
        p.delete(key)
        if isinstance(value, dict):
            items = list(value.items())
            for i in range(0, len(items), 5000):
                p.hset(key, mapping=dict(items[i : i + 5000]))
        elif isinstance(value, set):
            p.sadd(key, *value)
        elif isinstance(value, list):
            p.rpush(key, *value)
        else:
            p.set(key, value)  # type: ignore[arg-type]
    p.execute()
    wait_in_sync(*pair)


def test_big_hash_differences_found_in_bounded_memory(
    pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]
) -> None:
    n = 200_000
    load(pair, {b"big": {b"f%d" % i: b"v%d" % i for i in range(n)}})
    m = pair[0].client()
    plant(m, "HSET", "big", "f17", "changed")
    plant(m, "HSET", "big", "f150000", b"\x00\xff")
    plant(m, "HDEL", "big", "f99")
    plant(m, "HSET", "big", "only-on-master", "x")
    d = field_diff(*pipes, b"big", "hash", budget=2000)
    assert d is not None and d.exact and d.total == 4 and d.passes == 2
    by_field = {unquote(i["field"]): i for i in d.items}
    assert by_field[b"f17"] == {"field": '"f17"', "state": "differs", "master": '"changed"', "replica": '"v17"'}
    assert by_field[b"f150000"]["master"] == '"\\x00\\xff"'
    assert by_field[b"f99"]["state"] == "extra_on_replica"
    assert by_field[b"only-on-master"]["state"] == "missing_on_replica"
    assert (d.master_length, d.replica_length) == (n, n)


def test_memory_stays_bounded_by_buckets_and_pages(
    pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]
) -> None:
    n = 40_000
    fields = {b"field-%08d" % i: b"value-%08d-" % i + b"v" * 90 for i in range(n)}
    load(pair, {b"mem": fields})
    plant(pair[0].client(), "HSET", "mem", "field-00000007", "changed")
    # what holding one side's fields as Python bytes would take, dict not counted (about 7 MB)
    holding_one_side = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in fields.items())
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        d = field_diff(*pipes, b"mem", "hash", budget=500, page=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert d is not None and d.total == 1
    # 2 x 4096 sums, one page, one group of buckets and the 1 MiB socket read buffer
    assert peak - base < holding_one_side / 3, (peak - base, holding_one_side)


def test_first_100_listed_with_the_total(
    pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]
) -> None:
    load(pair, {b"h": {b"f%d" % i: b"v" for i in range(5000)}})
    m = pair[0].client()
    for i in range(0, 5000, 20):  # 250 differing fields
        plant(m, "HSET", "h", f"f{i}", "w")
    d = field_diff(*pipes, b"h", "hash", budget=300)
    assert d is not None and (d.total, len(d.items), d.exact) == (250, 100, True)
    assert d.passes > 2  # several groups of differing buckets, each one more pass
    hidden = field_diff(*pipes, b"h", "hash", show_values=False)
    assert hidden is not None and all(i["master"] is None and i["replica"] is None for i in hidden.items)


def test_budget_exhausted_gives_a_lower_bound(
    pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]
) -> None:
    load(pair, {b"h2": {b"f%d" % i: b"v" for i in range(2000)}})
    m = pair[0].client()
    for i in range(0, 2000, 4):  # 500 differing fields
        plant(m, "HSET", "h2", f"f{i}", "w")
    from audit.sources.redis.fields import unordered_diff

    d = unordered_diff(*pipes, b"h2", "hash", budget=10, max_expand_passes=2)
    assert not d.exact and 0 < d.total <= 500 and len(d.items) <= 100


def test_set_zset_list_string(pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]) -> None:
    load(pair, {b"s": {b"a", b"b", b"c"}, b"l": [b"x%d" % i for i in range(2500)], b"str": b"hello"})
    m = pair[0].client()
    m.delete("z")
    m.zadd("z", {"a": 1, "b": 2, "c": 3})
    wait_in_sync(*pair)
    plant(m, "SREM", "s", "b")
    plant(m, "SADD", "s", "new\n")
    plant(m, "ZADD", "z", "2.5", "b")
    plant(m, "LSET", "l", "1500", "changed")
    plant(m, "RPUSH", "l", "tail")
    plant(m, "SET", "str", 'he"llo\x00')

    s = field_diff(*pipes, b"s", "set")
    assert s is not None and s.total == 2
    assert {(i["member"], i["state"]) for i in s.items} == {
        ('"b"', "extra_on_replica"),
        ('"new\\n"', "missing_on_replica"),
    }
    z = field_diff(*pipes, b"z", "zset")
    assert z is not None and z.items == [{"member": '"b"', "state": "differs", "master": '"2.5"', "replica": '"2"'}]
    li = field_diff(*pipes, b"l", "list", page=1000)
    assert li is not None and [(i["index"], i["state"]) for i in li.items] == [
        (1500, "differs"),
        (2500, "missing_on_replica"),
    ]
    assert (li.master_length, li.replica_length) == (2501, 2500)
    st = field_diff(*pipes, b"str", "string")
    assert st is not None and st.items == [
        {"offset": 2, "state": "differs", "master": '"he\\"llo\\x00"', "replica": '"hello"'}
    ]
    assert field_diff(*pipes, b"str", "string", show_values=False).items == [{"offset": 2, "state": "differs"}]  # type: ignore[union-attr]


def test_hidden_values_hide_set_and_zset_members_behind_their_digest(
    pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]
) -> None:
    """A member is the value itself: `show_values: false` names it by its xxh3-64 only, never quoted."""
    import xxhash

    load(pair, {b"hs": {b"card-4111", b"card-5500"}, b"hh": {b"email": b"a@x"}})
    m = pair[0].client()
    m.delete("hz")
    m.zadd("hz", {"alice@example.com": 1})
    wait_in_sync(*pair)
    plant(m, "SADD", "hs", "card-3782")
    plant(m, "ZADD", "hz", "7", "alice@example.com")
    plant(m, "HSET", "hh", "email", "b@x")

    s = field_diff(*pipes, b"hs", "set", show_values=False)
    assert s is not None and s.items == [
        {"member_xxh3": f"{xxhash.xxh3_64_intdigest(b'card-3782'):016x}", "state": "missing_on_replica"}
    ]
    z = field_diff(*pipes, b"hz", "zset", show_values=False)
    digest = f"{xxhash.xxh3_64_intdigest(b'alice@example.com'):016x}"
    assert z is not None and z.items == [{"member_xxh3": digest, "state": "differs", "master": None, "replica": None}]
    h = field_diff(*pipes, b"hh", "hash", show_values=False)  # a field is a name, like the key: shown
    assert h is not None and h.items == [{"field": '"email"', "state": "differs", "master": None, "replica": None}]


def test_no_difference_on_a_healthy_pair_under_writes(
    pair: tuple[RedisServer, RedisServer], pipes: tuple[RespPipe, RespPipe]
) -> None:
    load(pair, {b"calm": {b"f%d" % i: b"v%d" % i for i in range(20_000)}, b"calm-list": [b"e"] * 3000})
    stop = threading.Event()

    def writer() -> None:
        c = pair[0].client()
        i = 0
        while not stop.is_set():
            c.hset("busy", f"k{i}", i)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for key, type_ in ((b"calm", "hash"), (b"calm-list", "list")):
            d = field_diff(*pipes, key, type_, budget=500)
            assert d is not None and (d.total, d.items, d.buckets_differing) == (0, [], 0)
    finally:
        stop.set()
        t.join()
