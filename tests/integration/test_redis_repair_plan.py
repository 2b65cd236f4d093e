"""A Redis repair plan's header tells how to apply it with redis-cli: its two recipes, run as written
(hosts and ports filled in) on real servers, bring the target to the source's keys."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from audit.findings import Finding
from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.repair import FLEET_REPLICAS, parse_line, write_plan

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")


def run_recipe(recipe: str, plan: Path, replica_port: int, master_port: int) -> None:
    """One of the plan header's redis-cli recipes, its placeholders filled in for loopback servers."""
    command = (
        recipe.replace("PLAN", str(plan))
        .replace("REPLICA-PORT", str(replica_port))
        .replace("-h REPLICA", f"-h 127.0.0.1 -p {replica_port}")
        .replace("MIGRATE REPLICA", "MIGRATE 127.0.0.1")
        .replace("-h MASTER", f"-h 127.0.0.1 -p {master_port}")
    )
    done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=30, check=True)
    assert b"ERR" not in done.stdout, (command, done.stdout)


def test_the_header_recipes_delete_the_extra_keys_and_copy_the_missing_ones(tmp_path: Path) -> None:
    # the header showed only the DEL recipe; docs/redis-fleets.md promised MIGRATE from the source too
    source = RedisServer(free_port(), tmp_path / "source").start()
    target = RedisServer(free_port(), tmp_path / "target").start()
    try:
        src, dst = source.client(), target.client()
        src.set(b"gone key", b"v1", px=600_000)
        src.set(b"changed", b"new")
        dst.set(b"changed", b"old")
        dst.set(b"only on target", b"x")
        findings = [
            Finding("keyspace", "missing_on_replica", db=0, key=b"gone key"),
            Finding("keyspace", "value_mismatch", db=0, key=b"changed"),
            Finding("keyspace", "extra_on_replica", db=0, key=b"only on target"),
        ]
        plan = write_plan(findings, tmp_path, pair="p", run_id="r", master=source.url, replica=target.url)
        recipes = [line.removeprefix("# redis-cli: ") for line in plan.path.read_text().splitlines()]
        recipes = [r for r in recipes if r.startswith("grep ")]
        assert [r.split()[1] for r in recipes] == ["'^DELETE", "'^RESYNC"]
        for recipe in recipes:
            run_recipe(recipe, plan.path, target.port, source.port)
        assert sorted(dst.keys()) == [b"changed", b"gone key"]
        assert dst.get(b"changed") == b"new" and dst.get(b"gone key") == b"v1"
        assert dst.pttl(b"gone key") > 500_000  # copied with its TTL
    finally:
        target.stop()
        source.stop()


def test_a_fleets_plan_puts_each_line_under_the_replica_it_is_for(tmp_path: Path) -> None:
    # a cluster's plan listed its keys without the node each was for: on a shard with two replicas a
    # key that differs on both came twice, neither saying where to repair it
    rows = [
        {"category": "value_mismatch", "db": 0, "key": b"both", "target": "10.0.0.2:7004 (shard 10.0.0.1:7001)"},
        {"category": "extra_on_replica", "db": 0, "key": b"x y", "target": "10.0.0.2:7004 (shard 10.0.0.1:7001)"},
        {"category": "missing_on_replica", "db": 0, "key": b"one", "target": "10.0.0.2:7004 (shard 10.0.0.1:7001)"},
        {"category": "value_mismatch", "db": 0, "key": b"both", "target": "10.0.0.3:7005 (shard 10.0.0.1:7001)"},
        {"category": "extra_on_replica", "db": 0, "key": b"z", "target": "10.0.0.9:7009 (shard 10.0.0.8:7008)"},
    ]
    plan = write_plan(rows, tmp_path, pair="c", run_id="r", master="m", replica=FLEET_REPLICAS)
    assert (plan.resync, plan.delete) == (3, 2)
    under: dict[str, list[tuple[str, int, bytes]]] = {}
    section = None
    for line in plan.path.read_text().splitlines():
        if line.startswith("# on replica "):
            section = line.removeprefix("# on replica ")
        elif (parsed := parse_line(line)) is not None:
            assert section is not None, line
            under.setdefault(section, []).append(parsed)
    assert under == {
        "10.0.0.2:7004 (shard 10.0.0.1:7001)": [("RESYNC", 0, b"both"), ("RESYNC", 0, b"one"), ("DELETE", 0, b"x y")],
        "10.0.0.3:7005 (shard 10.0.0.1:7001)": [("RESYNC", 0, b"both")],
        "10.0.0.9:7009 (shard 10.0.0.8:7008)": [("DELETE", 0, b"z")],
    }
    assert "A fleet: the lines under '# on replica HOST:PORT (shard NAME)' are for that node." in plan.path.read_text()


def test_a_pairs_plan_has_no_sections(tmp_path: Path) -> None:
    rows = [
        Finding("keyspace", "missing_on_replica", db=0, key=b"k"),
        {"category": "extra_on_replica", "db": 1, "key": b"e"},
    ]
    text = write_plan(rows, tmp_path, pair="p", run_id="r", master="m", replica="r").path.read_text()
    assert "# on replica" not in text and "A fleet" not in text
    assert [parse_line(x) for x in text.splitlines() if parse_line(x)] == [("RESYNC", 0, b"k"), ("DELETE", 1, b"e")]


def test_a_fleets_plan_has_one_section_per_replica_and_its_recipes_repair_each(tmp_path: Path) -> None:
    # a replica's DELETE lines came in a second section of its own after every RESYNC line, so the header's
    # recipes, which take every line of the file, had no section to run on: one replica's DELETEs went to all
    source = RedisServer(free_port(), tmp_path / "source").start()
    replicas = [RedisServer(free_port(), tmp_path / f"replica{i}").start() for i in range(2)]
    try:
        src = source.client()
        src.set(b"a", b"1")
        src.set(b"b", b"2")
        r0, r1 = (r.client() for r in replicas)
        r0.set(b"a", b"old")
        r0.set(b"extra 0", b"x")
        r1.set(b"a", b"1")
        r1.set(b"extra 1", b"y")
        shard = f"127.0.0.1:{source.port}"
        on = [f"127.0.0.1:{r.port} (shard {shard})" for r in replicas]
        rows = [  # ordered by target, as the fleet's writer reads them
            {"category": "value_mismatch", "db": 0, "key": b"a", "target": on[0]},
            {"category": "extra_on_replica", "db": 0, "key": b"extra 0", "target": on[0]},
            {"category": "missing_on_replica", "db": 0, "key": b"b", "target": on[0]},
            {"category": "extra_on_replica", "db": 0, "key": b"extra 1", "target": on[1]},
            {"category": "missing_on_replica", "db": 0, "key": b"b", "target": on[1]},
        ]
        plan = write_plan(rows, tmp_path, pair="c", run_id="r", master="m", replica=FLEET_REPLICAS)
        text = plan.path.read_text()
        assert [line for line in text.splitlines() if line.startswith("# on replica ")] == [
            f"# on replica {t}" for t in on
        ]
        header = [line.removeprefix("# ") for line in text.splitlines() if line.startswith("# ")]
        cut = next(h for h in header if "sed -n" in h).split(": ", 1)[1]
        recipes = [line.removeprefix("redis-cli: ") for line in header if line.startswith("redis-cli: grep ")]
        for replica in replicas:
            node = f"127.0.0.1:{replica.port}"
            section = tmp_path / f"{replica.port}.plan"
            subprocess.run(
                [
                    "bash",
                    "-c",
                    cut.replace("HOST:PORT", node).replace("NODE-PLAN", str(section)).replace("PLAN", str(plan.path)),
                ],
                check=True,
                timeout=30,
            )
            for recipe in recipes:
                run_recipe(recipe, section, replica.port, source.port)
        for client in (r0, r1):
            assert sorted(client.keys()) == [b"a", b"b"] and client.get(b"a") == b"1" and client.get(b"b") == b"2"
    finally:
        for server in (*replicas, source):
            server.stop()
