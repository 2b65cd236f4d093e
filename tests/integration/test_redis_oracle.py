"""Kind redis against an independent oracle (tests/redis_oracle.py): random keyspaces in three dbs of a real
master and replica, random divergences planted on the replica, or random writes on the master while the
audit runs, and the findings compared with what both sides read whole in plain Python say they must be.

One seed of each here; sweep more with `REDIS_ORACLE_SEEDS=1-40` (each seed is a pair of its own). The
sweep that made this module found a healthy pair under writes failing its gate on a key replaced by
another type between two pages of its read (3 of 27 seeds; tests/integration/test_redis_reads.py).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.local.redis_server import RedisServer, start_pair, wait_in_sync
from tests import redis_oracle as oracle
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration

DBS = (0, 1, 3)
KEY_CATEGORIES = {"missing_on_replica", "extra_on_replica", "type_mismatch", "value_mismatch", "ttl_mismatch"}


def _seeds(default: list[int]) -> list[int]:
    spec = os.environ.get("REDIS_ORACLE_SEEDS", "")
    if not spec:
        return default
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


@pytest.fixture()
def random_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer, int]]:
    """A master and replica of their own, the replica in the big encodings for half the seeds."""
    seed = request.param
    odd = random.Random(seed).random() < 0.5
    master, replica = start_pair(tmp_path / "servers", replica_extra=oracle.ODD_ENCODINGS if odd else None)
    yield master, replica, seed
    replica.stop()
    master.stop()


def _audit(master: RedisServer, replica: RedisServer, rnd: random.Random, tmp: Path, mp: pytest.MonkeyPatch) -> int:
    pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url}
    # pages of 10 or 50 elements: most collections are read in several pages, some in one
    inv = write_inventory(tmp / "inv.json", [pair], big_key_elements=rnd.choice([10, 50, 10_000]))
    return run_cli(["run", "-i", str(inv), "-o", str(tmp / "out"), "--quiet"], mp)


@pytest.mark.parametrize("random_pair", _seeds([1]), indirect=True)
def test_planted_divergences_are_what_the_oracle_finds(random_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica, seed = random_pair
    rnd = random.Random(seed)
    keys = {db: oracle.fill(master.client(db), rnd, rnd.choice([0, 50, 400])) for db in DBS}
    wait_in_sync(master, replica)
    for db in DBS:
        oracle.plant(replica.client(db), rnd, keys[db], rnd.randrange(0, 12))
    want = {
        (db, k, category)
        for db in DBS
        for k, category in oracle.expected(oracle.read_whole(master.client(db)), oracle.read_whole(replica.client(db)))
    }

    code = _audit(master, replica, rnd, tmp_path, monkeypatch)

    root = latest_run(tmp_path / "out")
    got = {(f["db"], f["key"], f["category"]) for f in findings(root) if f["category"] in KEY_CATEGORIES}
    assert (sorted(want - got), sorted(got - want)) == ([], []), "(only the oracle's, only the audit's)"
    assert code == (1 if want else 0)
    assert summary(root)["pairs"][0]["not_covered"] == []


@pytest.mark.parametrize("random_pair", _seeds([11]), indirect=True)
def test_a_healthy_pair_under_random_writes_has_no_finding(random_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica, seed = random_pair
    rnd = random.Random(seed)
    keys = {
        db: oracle.fill(master.client(db), rnd, rnd.choice([50, 400])) + oracle.fill_big(master.client(db))
        for db in DBS
    }
    wait_in_sync(master, replica)
    with oracle.writing([(master.client(DBS[i]), seed * 10 + i, keys[DBS[i]]) for i in range(2)]) as writes:
        code = _audit(master, replica, rnd, tmp_path, monkeypatch)

    root = latest_run(tmp_path / "out")
    pair = summary(root)["pairs"][0]
    assert sum(done for done, _ in writes) > 200, writes  # the audit ran under writes (10,000s here)
    assert findings(root) == [], findings(root)[:5]
    assert (code, pair["status"], pair["not_covered"]) == (0, "passed", [])
    assert pair["coverage"]["recheck_candidates"] > 0  # keys the writes moved were judged, not missed
