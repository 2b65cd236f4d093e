"""The retention rule (audit/retention.py), pure: runs and their recorded ends in, a decision out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from audit.errors import ConfigError
from audit.retention import Policy, Run, decide, pruned_runs

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def ended(days: float | None, run_id: str, trimmed: bool = False) -> Run:
    return Run(run_id, None if days is None else NOW - timedelta(days=days), trimmed)


RUNS = [ended(40, "a"), ended(10, "b"), ended(2, "c"), ended(0.5, "d"), ended(None, "running")]


def test_whole_runs_past_keep_days_and_bulky_parts_past_keep_snapshot_days() -> None:
    d = decide(RUNS, Policy(keep_days=30, keep_snapshot_days=7), NOW)
    assert d.delete == ("a",) and d.trim == ("b",)
    assert set(d.keep) == {"c", "d", "running"}
    assert d.keep["d"] == "the newest finished run" and d.keep["running"].startswith("not finished")


def test_only_one_age_given() -> None:
    assert (
        decide(RUNS, Policy(keep_days=5), NOW).delete == ("a", "b") and not decide(RUNS, Policy(keep_days=5), NOW).trim
    )
    d = decide(RUNS, Policy(keep_snapshot_days=1), NOW)
    assert d.delete == () and d.trim == ("a", "b", "c")


def test_the_newest_finished_run_is_kept_whatever_its_age_and_unfinished_runs_always() -> None:
    old = [ended(400, "x"), ended(300, "y"), ended(None, "z")]
    d = decide(old, Policy(keep_days=0, keep_snapshot_days=0, keep_last=1), NOW)
    assert d.delete == ("x",) and d.trim == () and set(d.keep) == {"y", "z"}


def test_an_unfinished_run_goes_only_past_keep_unfinished_days_by_its_start() -> None:
    """A killed run never resumed once stayed forever; only an age given for it lets it go."""
    runs = [
        Run("killed-long-ago", None, started_at=NOW - timedelta(days=20)),
        Run("killed-lately", None, started_at=NOW - timedelta(days=2)),
        Run("start-unknown", None),
        ended(1, "new"),
    ]
    assert decide(runs, Policy(keep_days=0), NOW).delete == ()
    d = decide(runs, Policy(keep_unfinished_days=7), NOW)
    assert d.delete == ("killed-long-ago",) and set(d.keep) == {"killed-lately", "start-unknown", "new"}


def test_keep_last_keeps_the_newest_by_recorded_end_not_by_name() -> None:
    runs = [ended(50, "z-oldest"), ended(40, "a-newer"), ended(45, "m-middle")]
    d = decide(runs, Policy(keep_days=1, keep_last=2), NOW)
    assert d.delete == ("z-oldest",) and d.keep == {
        "a-newer": "the newest finished run",
        "m-middle": "among --keep-last",
    }


def test_a_run_already_trimmed_is_not_trimmed_again_but_still_deleted_when_old() -> None:
    runs = [ended(10, "t", trimmed=True), ended(40, "u", trimmed=True), ended(0, "new")]
    d = decide(runs, Policy(keep_days=30, keep_snapshot_days=7), NOW)
    assert d.delete == ("u",) and d.trim == () and "already" in d.keep["t"]


def test_a_run_that_ended_in_the_future_is_young() -> None:
    d = decide([ended(-3, "skewed"), ended(0, "new")], Policy(keep_days=0, keep_snapshot_days=0), NOW)
    assert d.delete == () and d.trim == ()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keep_days": -1},
        {"keep_snapshot_days": float("nan")},
        {"keep_days": float("inf")},
        {"keep_days": 1e300},
        {"keep_days": 1, "keep_last": -1},
        {},
    ],
)
def test_bad_policies_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Policy(**kwargs)  # type: ignore[arg-type]


def test_pruned_runs_reads_the_log_and_skips_damaged_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert pruned_runs(tmp_path) == {}
    (tmp_path / "pruned-runs.jsonl").write_text('{"run_id": "a", "pruned_at": "T1"}\nnot json\n{"x": 1}\n')
    assert pruned_runs(tmp_path) == {"a": "T1"}
