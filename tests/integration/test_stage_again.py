"""A snapshot run again on a run whose snapshot had finished (an Airflow DAG run cleared, `snapshot
--run-id R` repeated) reads the servers again: the earlier snapshot is not certified as today's."""

from __future__ import annotations

from pathlib import Path

from audit import run_stage, start_run
from audit.local.redis_server import RedisServer, free_port
from audit.pipeline import STAGES
from audit.report.summary import pair_verdict
from audit.verify import verification_inventory


def test_a_finished_run_audited_again_reads_the_servers_again(tmp_path: Path) -> None:
    source = RedisServer(free_port(), tmp_path / "source").start()
    target = RedisServer(free_port(), tmp_path / "target").start()
    try:
        for server in (source, target):
            server.client().mset({f"k{i}": "v" for i in range(200)})
        inv = verification_inventory(source.url, target.url, "redis", settings={"recheck_interval_s": 0.1})
        pair = inv.pairs[0]
        run = start_run(inv, tmp_path / "out", "manual__2026-11-25T10_00_00_00_00")
        for stage in STAGES:
            run_stage(stage, pair, run)
        assert pair_verdict(run, pair.name)["status"] == "passed"

        target.client().set("k1", "changed")  # diverges after the first audit
        target.client().set("only-on-target", "x")
        for stage in STAGES:  # the run cleared and run again
            run_stage(stage, pair, run)
        verdict = pair_verdict(run, pair.name)
        # it passed: the snapshots of the first attempt were reused, the servers never read again
        assert verdict["status"] == "failed" and verdict["divergences"] == 2, verdict
    finally:
        source.stop()
        target.stop()
