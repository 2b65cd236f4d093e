"""Servers set up as production ones are: idle clients closed (`timeout`), against real redis-server pairs."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.local.redis_server import start_pair, wait_in_sync
from audit.local.sample import load_sample, plant_divergences
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration


def test_idle_clients_closed_by_timeout_between_recheck_rounds_do_not_end_the_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `timeout 1` closes a client idle for a second; the recheck's pipes wait `recheck_interval_s` (2 s by
    # default) between rounds, and without a replication stream to wait on (a migration) every difference
    # takes all the rounds: the server had closed both pipes by the second round, and the audit ended
    # "recheck failed: server closed the connection", the planted divergences unreported
    master, replica = start_pair(tmp_path / "s", replica_extra=["--timeout", "1"])
    try:
        master.client().config_set("timeout", "1")
        load_sample(master.client(), n_keys=2000, big_hash_fields=3000)
        wait_in_sync(master, replica)
        planted = plant_divergences(replica.client())
        pair = {"name": "p", "kind": "redis", "master": master.url, "replica": replica.url, "check_replication": False}
        inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_interval_s=2.0, big_key_elements=1000)
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
        root = latest_run(tmp_path / "out")
        assert {(f["category"], f["key"]) for f in findings(root)} == {(p.category, p.key) for p in planted}
        assert summary(root)["pairs"][0]["status"] == "failed"
    finally:
        replica.stop()
        master.stop()
