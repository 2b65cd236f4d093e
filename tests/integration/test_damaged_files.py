"""audit/kernel/damaged_files.py and the Redis snapshot's own files, damaged between stages on a real pair.

A part file cut short used to fail `diff` inside Spark (exit 4, a JVM traceback); a damaged checkpoint.json
failed a snapshot's re-run with a JSONDecodeError. Now the one is exit 2 naming the file, the other starts
the side over.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side
from tests.integration.helpers import latest_run, run_cli, write_inventory

pytestmark = pytest.mark.integration

DB = 6


@pytest.fixture()
def pair(redis_pair):  # type: ignore[no-untyped-def]
    master, replica = redis_pair
    c = master.client(DB)
    c.flushdb()
    c.mset({f"k{i}": i for i in range(300)})
    yield master, replica
    c.flushdb()


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_snapshot_part_cut_short_is_exit_2_naming_it(pair, tmp_path, monkeypatch, capfd) -> None:  # type: ignore[no-untyped-def]
    master, replica = pair
    entry = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url, "dbs": [DB]}
    inv = write_inventory(tmp_path / "inv.yaml", [entry])
    out = tmp_path / "out"
    assert run_cli(["snapshot", "-i", str(inv), "-o", str(out)], monkeypatch) == 0
    run = latest_run(out)
    parts = sorted((run / "snapshots" / "p" / "master").rglob("*.parquet"))
    parts = [p for p in parts if p.is_file()]
    assert parts
    _cut(parts[0])
    capfd.readouterr()
    code = run_cli(["diff", "-i", str(inv), "-o", str(out), "--run-id", run.name], monkeypatch)
    err = capfd.readouterr().err
    # the JVM's stderr too: its log's lines, and no Java stack under them
    assert code == 2, err
    assert str(parts[0]) in err.replace("\n", "") and "not a readable Parquet file" in err
    assert "Traceback" not in err and "Py4J" not in err and "\tat org.apache" not in err
    state = json.loads((run / "work" / "p" / "state.json").read_text())
    assert state["error"]["stage"] == "diff" and state["error"]["exit_code"] == 2


def test_a_damaged_checkpoint_starts_the_side_over_and_a_damaged_meta_is_written_again(pair, tmp_path) -> None:  # type: ignore[no-untyped-def]
    master, _ = pair
    client = master.client(DB)
    side = tmp_path / "side"
    options = SnapshotOptions(scan_count=50)
    first = snapshot_side(client, side="master", endpoint="t", dbs=[DB], out_dir=side, options=options)
    assert first["stats"]["keys_ok"] == 300
    (side / "snapshot.json").write_text('{"stats": ')  # a write cut short
    again = snapshot_side(client, side="master", endpoint="t", dbs=[DB], out_dir=side, options=options)
    assert again["stats"]["keys_ok"] == 300 and "reused" not in again
    assert json.loads((side / "snapshot.json").read_text())["stats"]["keys_ok"] == 300
    (side / "checkpoint.json").write_text("{")
    over = snapshot_side(client, side="master", endpoint="t", dbs=[DB], out_dir=side, options=options)
    assert over["stats"]["keys_ok"] == 300
    import pyarrow.dataset as ds

    assert ds.dataset(side / "keys.parquet", format="parquet").count_rows() == 300  # read once, not twice


@pytest.mark.parametrize("damage", ["cut", "deleted"])
def test_a_complete_side_with_a_part_damaged_since_is_read_again_not_reused(pair, tmp_path, damage) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.dataset as ds

    master, _ = pair
    client = master.client(DB)
    side = tmp_path / "side"
    options = SnapshotOptions(scan_count=50, rows_per_group=100)
    snapshot_side(client, side="master", endpoint="t", dbs=[DB], out_dir=side, options=options)
    parts = sorted((side / "keys.parquet").glob("part-*.parquet"))
    assert len(parts) >= 2
    _cut(parts[1]) if damage == "cut" else parts[1].unlink()
    again = snapshot_side(client, side="master", endpoint="t", dbs=[DB], out_dir=side, options=options)
    assert "reused" not in again and again["stats"]["keys_ok"] == 300
    assert ds.dataset(side / "keys.parquet", format="parquet").count_rows() == 300
