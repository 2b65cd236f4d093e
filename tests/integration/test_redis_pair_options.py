"""A standalone redis pair's keys filter, compare mode, field-level differences and repair plan, through
the CLI on a real master and replica (divergences planted on the master with EVAL and
redis.set_repl(redis.REPL_NONE): those writes do not replicate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.local.redis_server import RedisServer, wait_in_sync
from audit.sources.redis.repair import parse_line
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration

UNREPLICATED = "redis.set_repl(redis.REPL_NONE); return redis.call(unpack(ARGV))"


def test_filter_fields_and_plan_on_a_standalone_pair(
    fresh_pair: tuple[RedisServer, RedisServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    master, replica = fresh_pair
    m = master.client()
    for i in range(300):
        m.set(f"user:{i}", f"v{i}")
        m.set(f"tmp:{i}", i)
    m.hset("user:big", mapping={f"f{i}": i for i in range(5000)})
    m.rpush("user:list", *range(50))
    wait_in_sync(master, replica)
    for command in (
        ("HSET", "user:big", "f17", "changed"),
        ("HDEL", "user:big", "f18"),
        ("LSET", "user:list", "3", "x"),
        ("SET", "user:1", "secret-value"),
        ("SET", "tmp:2", "ignored"),
        ("SET", "user:new", "only here"),
    ):
        m.eval(UNREPLICATED, 0, *command)
    pair: dict[str, Any] = {
        "name": "cache",
        "kind": "redis",
        "master": master.url,
        "replica": replica.url,
        "keys": {"include": ["user:*"]},
        "show_values": False,
    }
    inv = write_inventory(tmp_path / "inv.yaml", [pair])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
    run = latest_run(tmp_path / "out")
    got = {bytes(r["key"]): (r["category"], json.loads(r["detail"])) for r in findings(run)}
    assert {k: c for k, (c, _) in got.items()} == {
        b"user:big": "value_mismatch",
        b"user:list": "value_mismatch",
        b"user:1": "value_mismatch",
        b"user:new": "missing_on_replica",
    }
    big = got[b"user:big"][1]["fields"]
    assert (big["total"], big["master_length"], big["replica_length"]) == (2, 4999, 5000)
    assert {(i["field"], i["state"]) for i in big["items"]} == {('"f17"', "differs"), ('"f18"', "extra_on_replica")}
    assert all(i["master"] is None and i["replica"] is None for i in big["items"])  # show_values: false
    assert got[b"user:list"][1]["fields"]["items"] == [
        {"index": 3, "state": "differs", "master": None, "replica": None}
    ]
    assert "secret-value" not in json.dumps(got[b"user:1"][1])
    s = summary(run)["pairs"][0]
    assert s["coverage"]["master_keys_filtered_out"] == 300 and s["coverage"]["replica_keys_filtered_out"] == 300
    assert s["coverage"]["recheck_divergent"] == len(got) == 4  # every finding was kept by the recheck
    assert any("SCAN MATCH 'user:*'" in n for n in s["notes"])
    plan = {parse_line(line) for line in (run / s["artifacts"]["repair plan"]).read_text().splitlines()}
    assert plan - {None} == {
        ("RESYNC", 0, b"user:big"),
        ("RESYNC", 0, b"user:list"),
        ("RESYNC", 0, b"user:1"),
        ("RESYNC", 0, b"user:new"),
    }
    html = (run / "report.html").read_text()
    assert "repair/cache.txt" in html and "f17" in html
    # what the inventory asked not to compare is said, never called full coverage
    assert s["limits"] == [
        next(n for n in s["notes"] if "SCAN MATCH" in n).join(("only the keys the filter keeps: ", ""))
    ]
    overview = html.split('<table id="pairs">')[1].split("</table>")[0]
    assert "full coverage" not in overview and "as asked: only the keys the filter keeps" in overview
    presence = write_inventory(tmp_path / "keys.yaml", [{**pair, "name": "presence", "compare": "keys"}])
    assert run_cli(["run", "-i", str(presence), "-o", str(tmp_path / "keys")], monkeypatch) == 1  # user:new
    run = latest_run(tmp_path / "keys")
    assert {bytes(r["key"]) for r in findings(run)} == {b"user:new"}  # the values were not read
    s = summary(run)["pairs"][0]
    assert any(limit.startswith("values not compared: compare: keys (presence only") for limit in s["limits"])
    overview = (run / "report.html").read_text().split('<table id="pairs">')[1].split("</table>")[0]
    assert "values not compared" in overview and "full coverage" not in overview
    assert s["compared"] == [f"{s['coverage']['keys_compared']:,} keys compared"] and s["compared"][0] in overview


@pytest.mark.parametrize("mode", ["keys", "length"])
def test_a_verification_certifies_what_its_compare_mode_compares(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # values differing at the same length (and, for `keys`, a type and an expiry): no finding, the gate
    # passed, and the certificate failed: "the content digests of source and target differ (keys that
    # differed when snapshotted agreed only when re-read)", its digests being of the whole content
    from audit.local.redis_server import free_port

    source = RedisServer(free_port(), tmp_path / "source").start()
    target = RedisServer(free_port(), tmp_path / "target").start()
    try:
        for server in (source, target):
            for i in range(50):
                server.client().set(f"k:{i}", f"v{i:03d}")
        target.client().set("k:3", "XXXX")
        if mode == "keys":
            target.client().delete("k:4")
            target.client().hset("k:4", "f", "v")
            target.client().expire("k:5", 3600)
        args = ["verify", "--source", source.url, "--target", target.url, "-o", str(tmp_path / "out"), "--quiet"]
        code = run_cli([*args, "--option", f"compare={mode}", "--setting", "recheck_interval_s=0.2"], monkeypatch)
        run = latest_run(tmp_path / "out")
        cert = json.loads((run / "certificate.json").read_text())
        assert findings(run) == []
        assert (code, cert["verdict"], cert["reasons"], cert["digests_equal"]) == (0, "passed", [], True)
        covers = {"keys": "db, key", "length": "db, key, type, element count, whether it expires"}[mode]
        assert cert["source"]["content"]["compared"] == cert["target"]["content"]["compared"] == covers
        assert f"xxh3_128-sum, of {covers})" in (run / "certificate.html").read_text()
    finally:
        source.stop()
        target.stop()
