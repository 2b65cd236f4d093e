"""The history store contract (shared with the MySQL backend), on the embedded SQLite default.

Run directories are produced by the pipeline's own writers (start_run, write_metrics, finish_run)
from planted per-pair states, so the store reads exactly what a real run leaves behind, without Spark.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from audit.errors import ConfigError, StageInputError
from audit.gate.verdict import write_metrics
from audit.history import HistoryStore, SqliteHistory, open_history, read_run, to_frame
from audit.inventory import parse_inventory
from audit.kernel.state import PairState
from audit.pipeline import finish_run, start_run

INVENTORY = json.dumps(
    {
        "pairs": [
            {"name": "cache", "kind": "redis", "master": "redis://127.0.0.1:1", "replica": "redis://127.0.0.1:2"},
            {"name": "sessions", "kind": "redis", "master": "redis://127.0.0.1:3", "replica": "redis://127.0.0.1:4"},
        ]
    }
)


def passed(lag_bytes: int = 0, lag_seconds: int = 1, diff_s: float = 2.5, **counts: int) -> dict[str, Any]:
    """A pair state as the stages leave it; any count makes the gate fail."""
    failed = [
        {"expectation": "expect_column_values_to_be_between", "column": c, "observed": n, "threshold": 0, "meaning": c}
        for c, n in sorted(counts.items())
    ]
    return {
        "metrics": {
            "master_keys": 1000,
            "replica_keys": 1000 - counts.get("missing_on_replica", 0),
            "keys_compared": 1000,
            "master_snapshot_s": 1.25,
            "replica_snapshot_s": 1.5,
            "master_keys_per_s": 800,
            "diff_s": diff_s,
            "lag_bytes": lag_bytes,
            "lag_seconds": lag_seconds,
        },
        "counts": dict(counts),
        "checks": {"keyspace": {"status": "done", "reason": "dbs [0]"}},
        "gate": {
            "success": not counts,
            "evaluated": 11,
            "failed": failed,
            "results_path": "gate/x.json",
            "data_docs": None,
            "gate_s": 0.5,
        },
        "stages": {s: {"at_ms": 1} for s in ("snapshot", "diff", "recheck", "gate")},
    }


def errored() -> dict[str, Any]:
    """A pair whose replica could not be reached after its master was snapshotted."""
    return {
        "metrics": {"master_keys": 1000, "master_snapshot_s": 1.0},
        "checks": {},
        "stages": {},
        "error": {
            "stage": "snapshot",
            "message": "replica 127.0.0.1:4: connection refused",
            "where": "127.0.0.1:4",
            "type": "SourceConnectError",
        },
    }


def make_run(out: Path, run_id: str, started_at: str, states: dict[str, dict[str, Any]]) -> Path:
    """A finished run directory, written by the pipeline's own code from the given pair states."""
    inventory = parse_inventory(INVENTORY)
    run = start_run(inventory, out, run_id)
    manifest = json.loads(run.manifest.read_text())
    run.manifest.write_text(json.dumps({**manifest, "started_at": started_at}))
    pairs = [inventory.pair(name) for name in states]
    for pair in pairs:
        state = PairState.model_validate({"pair": pair.name, "kind": pair.kind, **states[pair.name]})
        run.save_state(state)
        if state.gate is not None:
            write_metrics(run, pair, state)
    finish_run(inventory, run, pairs)
    return run.root


def build_runs(out: Path) -> dict[str, Path]:
    """Three runs of two pairs: all passed; divergences + an errored pair; other divergences, one pair."""
    return {
        "r1": make_run(
            out,
            "r1",
            "2026-01-01T00:00:00Z",
            {"cache": passed(lag_bytes=0, lag_seconds=1, diff_s=2.0), "sessions": passed()},
        ),
        "r2": make_run(
            out,
            "r2",
            "2026-01-02T00:00:00Z",
            {
                "cache": passed(lag_bytes=4096, lag_seconds=7, diff_s=3.0, missing_on_replica=2, value_mismatch=1),
                "sessions": errored(),
            },
        ),
        "r3": make_run(
            out,
            "r3",
            "2026-01-03T00:00:00Z",
            {"cache": passed(lag_bytes=512, lag_seconds=2, diff_s=2.5, ttl_mismatch=4)},
        ),
    }


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_runs(tmp_path_factory.mktemp("runs"))


class HistoryContract:
    """What every backend must do; a subclass provides a `store` fixture with an empty store."""

    def test_append_is_idempotent_by_run_id(self, store: HistoryStore, runs_dir: dict[str, Path]) -> None:
        written = store.append_run(runs_dir["r1"])
        n_metrics = len(read_run(runs_dir["r1"]).metrics)
        assert written == 1 + 2 + n_metrics
        store.append_run(runs_dir["r2"])
        assert store.append_run(runs_dir["r1"]) == written
        assert [r["run_id"] for r in store.runs()] == ["r1", "r2"]
        assert [h["run_id"] for h in store.pair_history("cache")] == ["r1", "r2"]
        assert [p["value"] for p in store.metric_series("cache", "diff_s")] == [2.0, 3.0]

    def test_reappending_replaces_the_run(self, store: HistoryStore, runs_dir: dict[str, Path], tmp_path: Path) -> None:
        store.append_run(runs_dir["r2"])
        changed = make_run(tmp_path, "r2", "2026-01-02T00:00:00Z", {"cache": passed(extra_on_replica=9)})
        store.append_run(changed)
        (only,) = store.pair_history("cache")
        assert only["counts"] == {"extra_on_replica": 9}
        assert store.pair_history("sessions") == []  # the old r2 had it; the new one does not
        assert store.metric_series("cache", "findings_missing_on_replica") == []

    def test_a_resumed_subset_keeps_the_rows_of_the_pairs_it_left_out(
        self, store: HistoryStore, tmp_path: Path
    ) -> None:
        root = make_run(tmp_path, "r9", "2026-01-09T00:00:00Z", {"cache": passed(), "sessions": passed(diff_s=7.0)})
        store.append_run(root)
        # `run --resume r9 --pair cache`: cache is audited again, sessions is left out of the summary
        inventory = parse_inventory(INVENTORY)
        run = start_run(inventory, tmp_path, "r9")
        cache = inventory.pair("cache")
        state = PairState.model_validate({"pair": "cache", "kind": cache.kind, **passed(value_mismatch=3)})
        run.save_state(state)
        write_metrics(run, cache, state)
        finish_run(inventory, run, [cache])
        assert read_run(root).kept_pairs == ("sessions",)
        store.append_run(root)
        (sessions,) = store.pair_history("sessions")
        assert sessions["run_id"] == "r9" and sessions["status"] == "passed"
        assert [p["value"] for p in store.metric_series("sessions", "diff_s")] == [7.0]
        (cache_row,) = store.pair_history("cache")
        assert cache_row["counts"] == {"value_mismatch": 3}
        (r9,) = store.runs()
        assert r9["pairs"] == 2

    def test_runs(self, store: HistoryStore, runs_dir: dict[str, Path]) -> None:
        for name in ("r3", "r1", "r2"):  # append order does not matter: start time does
            store.append_run(runs_dir[name])
        runs = store.runs()
        assert [r["run_id"] for r in runs] == ["r1", "r2", "r3"]
        r1, r2, _ = runs
        assert (r1["verdict"], r1["exit_code"], r1["pairs"], r1["pairs_not_passed"]) == ("passed", 0, 2, 0)
        assert (r2["verdict"], r2["exit_code"], r2["pairs"], r2["pairs_not_passed"]) == ("incomplete", 3, 2, 2)
        assert r1["started_at"] == "2026-01-01T00:00:00Z" and r1["ended_at"] >= r1["started_at"]
        assert r1["tool_version"] and len(r1["inventory_digest"]) == 64
        assert [r["run_id"] for r in store.runs(limit=2)] == ["r2", "r3"]
        assert [r["run_id"] for r in store.runs(since="2026-01-02")] == ["r2", "r3"]
        assert [r["run_id"] for r in store.runs(limit=1, since="2026-01-01T00:00:00Z")] == ["r3"]
        assert store.runs(since="2027-01-01") == []
        assert [
            r["run_id"] for r in store.runs(since=datetime(2026, 1, 3, 1, tzinfo=timezone(timedelta(hours=2))))
        ] == ["r3"]  # 01:00+02:00 is 2026-01-02T23:00Z

    def test_pair_history(self, store: HistoryStore, runs_dir: dict[str, Path]) -> None:
        for name in ("r1", "r2", "r3"):
            store.append_run(runs_dir[name])
        h1, h2, h3 = store.pair_history("cache")
        assert (h1["status"], h1["divergences"], h1["counts"], h1["failed_checks"]) == ("passed", 0, {}, [])
        assert (h2["status"], h2["divergences"]) == ("failed", 3)
        assert h2["counts"] == {"missing_on_replica": 2, "value_mismatch": 1}
        assert h2["failed_checks"] == ["missing_on_replica", "value_mismatch"]
        assert [(h["lag_bytes"], h["lag_seconds"]) for h in (h1, h2, h3)] == [(0, 1), (4096, 7), (512, 2)]
        assert h2["durations"] == {
            "diff_s": 3.0,
            "gate_s": 0.5,
            "master_snapshot_s": 1.25,
            "replica_snapshot_s": 1.5,
        }  # rates (*_per_s) are not durations
        assert h2["duration_s"] == pytest.approx(6.25)
        assert h2["kind"] == "redis" and h2["started_at"] == "2026-01-02T00:00:00Z"
        assert [h["run_id"] for h in store.pair_history("cache", limit=2)] == ["r2", "r3"]
        _, e2 = store.pair_history("sessions")
        assert (e2["run_id"], e2["status"], e2["counts"], e2["lag_bytes"]) == ("r2", "error", {}, None)
        assert e2["durations"] == {"master_snapshot_s": 1.0}
        assert store.pair_history("nope") == []

    def test_metric_series(self, store: HistoryStore, runs_dir: dict[str, Path]) -> None:
        for name in ("r1", "r2", "r3"):
            store.append_run(runs_dir[name])
        series = store.metric_series("cache", "lag_bytes")
        assert [(s["run_id"], s["value"]) for s in series] == [("r1", 0.0), ("r2", 4096.0), ("r3", 512.0)]
        assert [s["value"] for s in store.metric_series("cache", "findings_missing_on_replica")] == [2.0]
        assert [s["value"] for s in store.metric_series("cache", "gate_passed")] == [1.0, 0.0, 0.0]
        # an errored pair has no metrics.parquet: what it measured comes from summary.json
        assert [(s["run_id"], s["value"]) for s in store.metric_series("sessions", "master_keys")] == [
            ("r1", 1000.0),
            ("r2", 1000.0),
        ]
        frame = to_frame(series)
        assert list(frame.columns) == ["run_id", "started_at", "value"] and frame["value"].sum() == 4608.0

    def test_category_series(self, store: HistoryStore, runs_dir: dict[str, Path]) -> None:
        for name in ("r1", "r2", "r3"):
            store.append_run(runs_dir[name])
        assert store.category_series("cache") == [
            {
                "run_id": "r1",
                "started_at": "2026-01-01T00:00:00Z",
                "status": "passed",
                "missing_on_replica": 0,
                "ttl_mismatch": 0,
                "value_mismatch": 0,
            },
            {
                "run_id": "r2",
                "started_at": "2026-01-02T00:00:00Z",
                "status": "failed",
                "missing_on_replica": 2,
                "ttl_mismatch": 0,
                "value_mismatch": 1,
            },
            {
                "run_id": "r3",
                "started_at": "2026-01-03T00:00:00Z",
                "status": "failed",
                "missing_on_replica": 0,
                "ttl_mismatch": 4,
                "value_mismatch": 0,
            },
        ]
        assert [row["status"] for row in store.category_series("sessions")] == ["passed", "error"]

    def test_unfinished_run_is_refused_and_changes_nothing(
        self, store: HistoryStore, runs_dir: dict[str, Path], tmp_path: Path
    ) -> None:
        store.append_run(runs_dir["r1"])
        run = start_run(parse_inventory(INVENTORY), tmp_path, "half")
        with pytest.raises(StageInputError, match=r"summary\.json"):
            store.append_run(run.root)
        assert [r["run_id"] for r in store.runs()] == ["r1"]

    def test_reopening_keeps_the_data(self, store: HistoryStore, runs_dir: dict[str, Path], reopen: Any) -> None:
        store.append_run(runs_dir["r1"])
        store.close()
        again = reopen()
        try:
            assert [r["run_id"] for r in again.runs()] == ["r1"]
        finally:
            again.close()


class TestSqliteHistory(HistoryContract):
    @pytest.fixture()
    def store(self, tmp_path: Path) -> Iterator[HistoryStore]:
        s = open_history(f"sqlite:///{tmp_path}/h.sqlite")
        yield s
        s.close()

    @pytest.fixture()
    def reopen(self, tmp_path: Path) -> Any:
        return lambda: open_history(f"sqlite:///{tmp_path}/h.sqlite")


def test_default_store_is_a_wal_sqlite_file_in_the_output_dir(tmp_path: Path, runs_dir: dict[str, Path]) -> None:
    with open_history(None, out=tmp_path / "out") as store:
        store.append_run(runs_dir["r1"])
    path = tmp_path / "out" / "history.sqlite"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
    assert conn.execute("SELECT COUNT(*) FROM pair_results").fetchone() == (2,)


def test_sqlite_url_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_history("sqlite:///rel/h.sqlite") as store:
        assert isinstance(store, SqliteHistory) and store.where == "rel/h.sqlite"
    assert (tmp_path / "rel" / "h.sqlite").exists()
    with open_history(f"sqlite:///{tmp_path}/abs.sqlite") as store:
        assert store.where == f"{tmp_path}/abs.sqlite"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("postgres://u:hunter2@db:5432/h", "unsupported URL"),
        ("history.sqlite", "unsupported URL"),
        ("sqlite://host/h.sqlite", "not a SQLite URL"),
        ("sqlite:///", "needs a file path"),
        ("sqlite:///h.sqlite?mode=ro", "needs a file path"),
        ("mysql://u:hunter2@db:3306/", "database name"),
        ("mysql://u:hunter2@db:3306/a/b", "database name"),
        ("mysql://u:hunter2@db:port/h", "bad host or port"),
        # urlsplit reads "hunter2/x@db" as host "u" and port "hunter2": its error quoted the port
        ("mysql://u:hunter2/x@db:3306/h", "percent-encode it"),
        ("mysql://db:3306/h", "no user"),
        ("mysql://u:hunter2@:3306/h", "no host"),
        ("mysql://u:hunter2@db/h?charset=latin1", "unknown parameter 'charset'"),
        ("mysql://u:hunter2@db/h?connect_timeout=soon", "connect_timeout"),
    ],
)
def test_bad_url_is_a_config_error_naming_the_field(url: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        open_history(url)
    assert str(e.value).startswith("history: ") and needle in str(e.value)
    assert "hunter2" not in str(e.value)


def test_no_url_and_no_output_dir() -> None:
    with pytest.raises(ConfigError, match="history: no URL"):
        open_history(None)


def test_concurrent_appends_from_separate_connections(tmp_path: Path, runs_dir: dict[str, Path]) -> None:
    url = f"sqlite:///{tmp_path}/h.sqlite"
    open_history(url).close()  # schema first, as a deployment's first run would
    errors: list[BaseException] = []

    def appender(names: list[str]) -> None:
        try:
            with open_history(url) as store:
                for _ in range(5):
                    for name in names:
                        store.append_run(runs_dir[name])
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(names,)) for names in (["r1", "r2"], ["r2", "r3"], ["r3"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open_history(url) as store:
        assert [r["run_id"] for r in store.runs()] == ["r1", "r2", "r3"]
        assert len(store.pair_history("cache")) == 3


def test_a_reader_reads_while_another_process_holds_the_write_lock(tmp_path: Path, runs_dir: dict[str, Path]) -> None:
    """The daily report and a report's charts only read; WAL lets them read while a writer holds the file
    (an operator's `sqlite3` session, a long append). Opening the store took the write lock to create the
    schema: the daily report waited 30 s, then failed with exit 3 ("database is locked")."""
    url = f"sqlite:///{tmp_path}/h.sqlite"
    with open_history(url) as store:
        store.append_run(runs_dir["r1"])
    holder = sqlite3.connect(tmp_path / "h.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with open_history(url) as store:
            assert [r["run_id"] for r in store.runs()] == ["r1"]
        assert time.monotonic() - started < 5
    finally:
        holder.rollback()
        holder.close()


def test_store_written_by_a_newer_version_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.sqlite"
    open_history(url).close()
    with sqlite3.connect(tmp_path / "h.sqlite") as conn:
        conn.execute("UPDATE history_meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(ConfigError, match="schema version 99 is newer"):
        open_history(url)


def test_read_run_of_a_real_layout(runs_dir: dict[str, Path]) -> None:
    record = read_run(runs_dir["r2"])
    assert (record.run_id, record.exit_code, record.verdict) == ("r2", 3, "incomplete")
    assert [(p.pair, p.status) for p in record.pairs] == [("cache", "failed"), ("sessions", "error")]
    metrics = {(pair, m): v for pair, m, v in record.metrics}
    assert metrics[("cache", "findings_value_mismatch")] == 1.0 and metrics[("cache", "gate_passed")] == 0.0
    assert ("sessions", "gate_passed") not in metrics and metrics[("sessions", "master_keys")] == 1000.0


def test_a_store_path_under_a_file_is_a_config_error(tmp_path: Path) -> None:
    # a typo'd --out or --history: exit 2 with the path, not "could not audit" (exit 3)
    from audit.history.sqlite import SqliteHistory

    (tmp_path / "afile").write_text("")
    with pytest.raises(ConfigError, match=r"afile/history\.sqlite: cannot create its directory"):
        SqliteHistory(tmp_path / "afile" / "history.sqlite")


@pytest.mark.parametrize("given", [None, "", "  "])
def test_a_history_not_given_or_given_blank_is_the_environments_everywhere(
    given: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--history ""` (a template that rendered empty) once meant OUT's sqlite to the run's record, the
    # environment's store to its report and daily report, and was not checked before the audit at all
    from audit.history import ENV_VAR, check_history_url, history_url

    monkeypatch.setenv(ENV_VAR, f"sqlite:///{tmp_path}/h.sqlite")
    assert history_url(given) == f"sqlite:///{tmp_path}/h.sqlite"
    assert history_url("sqlite:///other.sqlite") == "sqlite:///other.sqlite"
    monkeypatch.setenv(ENV_VAR, "postgres://db/h")
    with pytest.raises(ConfigError, match=f"^{ENV_VAR}: history: unsupported URL"):
        check_history_url(given)
    monkeypatch.delenv(ENV_VAR)
    assert history_url(given) is None
    check_history_url(given)  # OUT's sqlite: nothing to check


@pytest.mark.parametrize("value", ["hunter2secret", "u:hunter2secret@db:3306/h"])
def test_a_history_connection_whose_value_is_no_url_is_never_quoted(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a secret manager's key holding just the password, or a URL whose scheme was left out
    monkeypatch.setenv("AIRFLOW_CONN_HIST", value)
    with pytest.raises(ConfigError) as e:
        open_history("conn:hist")
    assert str(e.value).startswith("history: ") and "hunter2secret" not in str(e.value)
