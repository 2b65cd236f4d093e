"""Layers and range keys against real data: a gap planted in a generated slave binlog, and the same two
command streams applied to two real redis-servers (the master's stream to one, the slave's to the other),
read through Pika faces (tests/pika_front.py) by the keyspace snapshot and diffed by the keyspace diff.

What the binlogs say (which keys the gap touched, in which layer each diverged key was lost) is checked
against what the servers hold, read directly and type by type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.diagnose import diagnose
from audit.kernel.staging import finding_from_row
from audit.local.redis_server import RedisServer, free_port
from tests.pika_scenarios import commands, gap_plan, write_master, write_slave
from tests.pika_spark import diff_binlogs, scan_sides

pytestmark = pytest.mark.integration
FILE_SIZE = 64 * 1024
N, GAP = 1500, (700, 40)


@pytest.fixture()
def two_servers(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """Two independent redis-servers: replication is what the binlogs model, not what redis does here."""
    a = RedisServer(free_port(), tmp_path / "a").start()
    b = RedisServer(free_port(), tmp_path / "b").start()
    yield a, b
    b.stop()
    a.stop()


def _apply(client: redis.Redis, cmds: list[list[bytes]]) -> None:
    pipe = client.pipeline(transaction=False)
    for c in cmds:
        pipe.execute_command(*c)
    pipe.execute()


def _content(c: redis.Redis, key: bytes) -> tuple[Any, ...]:
    kind = c.type(key)
    value: Any = {
        b"string": lambda: c.get(key),
        b"hash": lambda: sorted(c.hgetall(key).items()),
        b"list": lambda: c.lrange(key, 0, -1),
        b"none": lambda: None,
    }[kind]()
    pttl = c.pttl(key)
    return kind, value, pttl > 0


def _snapshot(spark: Any, fronts: Any, out: Path) -> Any:
    from audit.diff.findings import keyspace_findings
    from audit.diff.keyspace import diff_snapshots
    from audit.sources.redis.snapshot import KEYS_FILE, SnapshotOptions, snapshot_side

    paths = []
    for side, front in zip(("master", "replica"), fronts, strict=True):
        client = redis.Redis(host="127.0.0.1", port=front.port, protocol=2)
        options = SnapshotOptions(scan_count=500, page=1000)
        snapshot_side(client, side=side, endpoint=front.url, dbs=[0], out_dir=out / side, options=options)
        paths.append(str(out / side / KEYS_FILE))
    diff_snapshots(spark, *paths, str(out / "candidates.parquet"), 2000)
    return keyspace_findings(spark.read.parquet(str(out / "candidates.parquet")), 0)


def test_a_gap_explains_every_diverged_key_and_its_layer(spark, two_servers, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.pika.layers import annotate_keyspace, shipped_frontier
    from audit.sources.pika.range_keys import keys_of_ranges
    from tests.pika_front import start_pika_pair

    cmds = commands(N, 0)
    log = write_master(tmp_path / "m", 0, cmds, FILE_SIZE)
    plan = gap_plan(N, *GAP)
    write_slave(tmp_path / "s", 0, log, plan, FILE_SIZE)
    a, b = two_servers
    _apply(a.client(0), cmds)
    _apply(b.client(0), [cmds[i] for i, _ in plan])
    fm, fs = start_pika_pair(a.port, b.port, [0], tmp_path / "m", tmp_path / "s")
    try:
        keyspace = _snapshot(spark, (fm, fs), tmp_path / "snap")
    finally:
        fm.stop()
        fs.stop()
    m, s = scan_sides(spark, tmp_path)
    diff = diff_binlogs(spark, m, s, tmp_path / "work", 1)
    annotated = annotate_keyspace(keyspace, m, s, shipped_frontier(diff.matched))
    ks = diagnose("pika", [finding_from_row(r.asDict()) for r in annotated.collect()])

    # what the servers hold, read directly: the keys the gap touched that really differ
    touched = list(dict.fromkeys(c[1] for c in cmds[GAP[0] : GAP[0] + GAP[1]]))
    really = {k for k in touched if _content(a.client(0), k) != _content(b.client(0), k)}
    assert 0 < len(really) < len(touched)  # some were written again after the gap and converged
    assert {f.key for f in ks} == really  # the keyspace diff sees exactly those, nothing else
    for f in ks:  # every one is placed in the layer the gap is in
        assert (f.evidence["layer"], f.diagnosis) == ("not_shipped", "PIKA_NOT_SHIPPED"), f

    (gap,) = [json.loads(r["detail"]) for r in keys_of_ranges(diff.findings, m, s, annotated).collect()]
    assert gap["keys"]["total"] == len(touched)
    assert gap["keys"]["first"] == [k.decode() for k in touched]
    assert gap["keys_differing_on_slave"] == len(really)
    assert set(gap["slave_data"]["first_differing"]) == {k.decode() for k in really}
