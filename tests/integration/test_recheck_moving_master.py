"""The recheck with the replication stream, while the master is written.

A round reads the master, waits until the replica has applied the master's position, reads the replica,
then the master again. Two master reads alike do not show that the key stood still between them: it may
have moved and come back (deleted and created again, a member added and removed) while the replica,
read in between, held the state it passed through. A healthy replica was then "confirmed divergent":
under churn on a few thousand keys, tens of false findings per audit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import audit.sources.redis.recheck as recheck_module
from audit.local.redis_server import RedisServer, wait_in_sync
from audit.sources.redis.ack import RedisOffsetAck
from audit.sources.redis.recheck import MASTER_FIELDS, RecheckStats, recheck
from audit.sources.redis.resp import RespPipe

pytestmark = pytest.mark.integration
Pair = tuple[RedisServer, RedisServer, list[RespPipe]]


@pytest.fixture()
def pair(fresh_pair: tuple[RedisServer, RedisServer]) -> Iterator[Pair]:
    master, replica = fresh_pair
    replica.client().config_set("replica-read-only", "no")
    pipes = [RespPipe(s.client()) for s in (master, replica)]
    yield master, replica, pipes
    for p in pipes:
        p.close()


def run_recheck(
    spark: Any, pipes: list[RespPipe], keys: list[bytes], judge_hot_keys: int
) -> tuple[set[Any], RecheckStats]:
    columns = ", ".join(f"{f} {'bigint' if f in ('m_length', 'm_expire_at_ms') else 'string'}" for f in MASTER_FIELDS)
    candidates = spark.createDataFrame(
        [(0, k, "string", "?", 1, None, "ok") for k in keys], f"db int, key binary, {columns}"
    )
    survivors, stats = recheck(
        spark,
        candidates,
        pipes[0],
        pipes[1],
        rounds=3,
        interval_s=0.05,
        tolerance_ms=2000,
        page=100,
        window_bytes=1 << 20,
        ack=RedisOffsetAck(),
        judge_hot_keys=judge_hot_keys,
    )
    return {(bytes(r["key"]), r["category"]) for r in survivors.collect()}, stats


def around_reads(monkeypatch: pytest.MonkeyPatch, act: Callable[[str, int, str], None], replica_pipe: RespPipe) -> None:
    """Calls act(side, n, "before" | "after") around the n-th recheck read of each side's keys."""
    real, calls = recheck_module.read_keys, {"master": 0, "replica": 0}

    def wrapped(reader, keys, pacer=None):  # type: ignore[no-untyped-def]
        side = "replica" if getattr(reader, "pipe", None) is replica_pipe else "master"
        calls[side] += 1
        act(side, calls[side], "before")
        try:
            return real(reader, keys, pacer)
        finally:
            act(side, calls[side], "after")

    monkeypatch.setattr(recheck_module, "read_keys", wrapped)


@pytest.mark.parametrize("judge_hot_keys", [100, 0])
def test_a_key_that_moved_and_came_back_around_the_replica_read_is_not_a_divergence(
    spark: Any,
    pair: Pair,
    monkeypatch: pytest.MonkeyPatch,
    judge_hot_keys: int,
) -> None:
    master, replica, pipes = pair
    m = master.client()
    m.set("k", "A")
    wait_in_sync(master, replica)

    def moved_and_back(side: str, n: int, when: str) -> None:
        if side == "replica" and n == 1:  # the first round's replica read sees the key as B, the master reads A twice
            m.set("k", "B" if when == "before" else "A")
            wait_in_sync(master, replica)

    around_reads(monkeypatch, moved_and_back, pipes[1])
    found, stats = run_recheck(spark, pipes, [b"k"], judge_hot_keys)
    assert found == set() and stats.converged == 1 and stats.confirmed == 0


@pytest.mark.parametrize("judge_hot_keys", [100, 0])
def test_divergences_are_still_confirmed_while_the_master_writes_other_keys(
    spark: Any,
    pair: Pair,
    monkeypatch: pytest.MonkeyPatch,
    judge_hot_keys: int,
) -> None:
    master, replica, pipes = pair
    m = master.client()
    m.set("small", "A")
    m.set("gone", "A")
    m.hset("big", mapping={f"f{i}": i for i in range(500)})  # more than a page: never read whole by the judge
    wait_in_sync(master, replica)
    r = replica.client()
    r.set("small", "planted")
    r.delete("gone")
    r.hset("big", "f7", "planted")
    written = [0]

    def other_writes(side: str, n: int, when: str) -> None:  # the master's position moves during every round
        written[0] += 1
        m.set("elsewhere", written[0])

    around_reads(monkeypatch, other_writes, pipes[1])
    found, stats = run_recheck(spark, pipes, [b"small", b"gone", b"big"], judge_hot_keys)
    assert found == {(b"small", "value_mismatch"), (b"gone", "missing_on_replica"), (b"big", "value_mismatch")}
    assert stats.confirmed == 3 and stats.in_flight == 0
