"""`recheck_confirmed_live` is only reported where the replication stream judged the recheck.

It counts divergences confirmed against the stream: the replica had applied the master's read and still
differed. Two servers that do not replicate (a `verify`, a pair with `check_replication: false`) have no
stream: their divergences are judged by rounds (`recheck_divergent`), and a `recheck_confirmed_live: 0`
in the summary, the report and the certificate read as "none of the divergences was confirmed live".
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from audit.local.redis_server import RedisServer, free_port, start_pair, wait_in_sync
from tests.integration.helpers import latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration
METRIC = "recheck_confirmed_live"


def load(server: RedisServer, n: int = 200) -> None:
    c = server.client()
    c.mset({f"k:{i}": i for i in range(n)})


def metric_names(root: Path) -> set[str]:
    """The metrics the gate wrote (metrics.parquet, which the history store keeps)."""
    return set(
        ds.dataset(root / "metrics.parquet", format="parquet").to_table(columns=["metric"])["metric"].to_pylist()
    )


def assert_not_presented(root: Path) -> None:
    """Absent from every output a person or a gate reads: summary.json, report.html, metrics.parquet."""
    pair = summary(root)["pairs"][0]
    assert METRIC not in pair["metrics"] and METRIC not in pair["coverage"], pair["coverage"]
    assert METRIC not in (root / "report.html").read_text()
    assert METRIC not in metric_names(root) and "recheck_divergent" in metric_names(root)
    assert pair["metrics"]["recheck_divergent"] == 1  # judged by rounds, and said so


def test_verify_of_two_servers_that_do_not_replicate_reports_no_live_confirmation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = RedisServer(free_port(), tmp_path / "source").start()
    target = RedisServer(free_port(), tmp_path / "target").start()
    try:
        for server in (source, target):
            load(server)
        target.client().set("k:7", "copied wrong")
        args = ["verify", "--source", source.url, "--target", target.url, "-o", str(tmp_path / "out")]
        code = run_cli([*args, "--setting", "recheck_interval_s=0.1"], monkeypatch)
    finally:
        source.stop()
        target.stop()
    assert code == 1
    root = latest_run(tmp_path / "out")
    assert_not_presented(root)
    cert = json.loads((root / "certificate.json").read_text())
    assert cert["findings"] == {"value_mismatch": 1}
    assert METRIC not in cert["compared"] and "recheck_divergent" in cert["compared"]
    assert METRIC not in (root / "certificate.html").read_text()
    assert METRIC not in capsys.readouterr().out


def test_a_replicated_run_still_reports_its_live_confirmations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    master, replica = start_pair(tmp_path / "servers")
    try:
        load(master)
        wait_in_sync(master, replica)
        replica.client().config_set("replica-read-only", "no")
        replica.client().set("k:7", "written on the replica")  # a divergence the stream confirms
        pairs = [{"name": "p", "kind": "redis", "master": master.url, "replica": replica.url}]
        inv = write_inventory(tmp_path / "inv.yaml", pairs)
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
        # the same two servers read without the stream: rounds only, no live confirmation to report
        inv = write_inventory(tmp_path / "inv-norepl.yaml", [{**pairs[0], "check_replication": False}])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out-norepl")], monkeypatch) == 1
    finally:
        replica.stop()
        master.stop()
    root = latest_run(tmp_path / "out")
    pair = summary(root)["pairs"][0]
    assert pair["metrics"][METRIC] == 1 and pair["coverage"][METRIC] == 1
    assert METRIC in (root / "report.html").read_text() and METRIC in metric_names(root)
    assert_not_presented(latest_run(tmp_path / "out-norepl"))
