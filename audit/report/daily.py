"""The daily data-quality report: the results history of the last days, per pair, as one HTML page.

    render_daily_report(Path("/data/audit"))           # -> /data/audit/reports/daily-2026-11-22.html

Per pair: the latest verdict, divergences by category over time (stacked bars, one per run), lag
over time, master vs replica offsets when the runs measured them, and the recent runs with links to
each run's report.html and GX Data Docs (relative links, valid while the page stays in
`<out>/reports/` next to the run directories). Reads the history store (:mod:`audit.history`) and,
for offsets and links, the run directories under `out` when they are there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from audit.errors import ConfigError
from audit.history import HistoryStore, open_history
from audit.history import history_url as history_of
from audit.history.record import format_time
from audit.layout import TIME_FORMAT, write_text
from audit.report import charts
from audit.report.html import data_docs_links
from audit.report.offsets import OFFSET_METRICS, REPLICATION_UNIT, run_offsets
from audit.retention import pruned_runs

DAYS = 7
"""How many days back the daily report looks by default."""

RECENT_RUNS = 50
"""Runs listed per pair in the report's table (newest first); the plots use every run of the window."""

REPORTS_DIR = "reports"


@dataclass
class PairTrend:
    pair: str
    kind: str
    latest: dict[str, Any]
    runs: list[dict[str, Any]]
    """Oldest first, each with `report` / `data_docs` links when the run directory is there."""
    charts: dict[str, str] = field(default_factory=dict)
    offsets_unit: str | None = None

    @property
    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.runs:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return counts


def _as_of(value: datetime | str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if isinstance(value, str):
        day_only = len(value.strip()) == 10  # 2026-11-24: the report of that whole day, up to its end
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"daily report: as_of {value!r} is not an ISO date or time") from None
        if day_only:
            value += timedelta(days=1)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _label(started_at: str | None) -> str:
    if not started_at:
        return "?"
    try:
        return datetime.strptime(started_at, TIME_FORMAT).strftime("%m-%d %H:%M")
    except ValueError:
        return started_at


def _summary_pair(out: Path, run_id: str, pair: str) -> dict[str, Any] | None:
    path = out / run_id / "summary.json"
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return next((p for p in summary.get("pairs", []) if p.get("pair") == pair), None)


def _links(
    out: Path, run_id: str, pair: str, entry: dict[str, Any] | None, pruned: dict[str, str]
) -> dict[str, str | None]:
    """Links from `<out>/reports/` to the run's report and Data Docs, only for files that exist. The Data
    Docs link is the pair's validation page when the run has one: the site's index lists only the latest
    results (audit/gate/gx.py), so an older run is found by its own page. A run `replica-audit prune`
    deleted has no links and says when it was pruned (`pruned`); its history rows stay."""
    root = out / run_id
    if not root.is_dir() and run_id in pruned:
        return {"report": None, "data_docs": None, "pruned": pruned[run_id]}
    report = f"../{run_id}/report.html" if (root / "report.html").is_file() else None
    index = ((entry or {}).get("gate") or {}).get("data_docs") or "gate/data_docs/index.html"
    pages = dict(data_docs_links(root, pair, {"data_docs": index}))
    docs_rel = pages.get("validation result") or pages.get("Data Docs index")
    return {"report": report, "data_docs": f"../{run_id}/{docs_rel}" if docs_rel else None, "pruned": None}


def _pair_names(store: HistoryStore, runs: list[dict[str, Any]], out: Path) -> list[str]:
    """The pairs recorded by these runs: from the store when it can list them, else from the run directories."""
    lister = getattr(store, "pairs", None)
    if callable(lister):
        return sorted(str(p) for p in lister())
    names: set[str] = set()
    for run in runs:
        path = out / str(run["run_id"]) / "summary.json"
        if path.is_file():
            try:
                names.update(p["pair"] for p in json.loads(path.read_text()).get("pairs", []))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return sorted(names)


def _offset_series(
    store: HistoryStore, pair: str, runs: list[dict[str, Any]], out: Path
) -> tuple[list[float | None], list[float | None], str] | None:
    """Per run (aligned with `runs`): master and replica offsets, from metrics or the runs' summaries."""
    run_ids = [r["run_id"] for r in runs]
    for m_name, r_name in OFFSET_METRICS:
        m = {row["run_id"]: row["value"] for row in store.metric_series(pair, m_name)}
        r = {row["run_id"]: row["value"] for row in store.metric_series(pair, r_name)}
        if m and r:
            return [m.get(i) for i in run_ids], [r.get(i) for i in run_ids], REPLICATION_UNIT
    master: list[float | None] = []
    replica: list[float | None] = []
    unit = None
    for run in runs:
        offsets = run_offsets(run["entry"]) if run.get("entry") else None
        last = offsets.last if offsets else (None, None)
        master.append(last[0])
        replica.append(last[1])
        unit = unit or (offsets.unit if offsets else None)
    if unit is None:
        return None
    return master, replica, unit


def pair_trend(store: HistoryStore, pair: str, out: Path, since: str, until: str) -> PairTrend | None:
    """The pair's runs started in [since, until] with their links and charts; None when it has none."""
    history = [h for h in store.pair_history(pair) if h["started_at"] and since <= h["started_at"] <= until]
    if not history:
        return None
    pruned = pruned_runs(out)
    for h in history:
        h["entry"] = _summary_pair(out, h["run_id"], pair)
        h.update(_links(out, h["run_id"], pair, h["entry"], pruned))
    labels = [_label(h["started_at"]) for h in history]
    categories = sorted({c for h in history for c in h["counts"]})
    finished = [h["status"] not in ("error", "incomplete") for h in history]
    series = {
        c: [int(h["counts"].get(c, 0)) if ok else None for h, ok in zip(history, finished, strict=True)]
        for c in categories
    }
    if not categories and not all(finished):
        series = {"(none)": [0 if ok else None for ok in finished]}
    trend = PairTrend(pair=pair, kind=history[-1]["kind"], latest=history[-1], runs=history)
    found = {
        "categories": charts.categories_over_time(labels, series) if series else None,
        "lag": charts.lag_over_time(labels, [h["lag_bytes"] for h in history], [h["lag_seconds"] for h in history]),
    }
    offsets = _offset_series(store, pair, history, out)
    if offsets is not None:
        found["offsets"] = charts.offsets_over_time(labels, offsets[0], offsets[1], offsets[2])
        trend.offsets_unit = offsets[2]
    trend.charts = {name: uri for name, uri in found.items() if uri}
    return trend


def report_day(until: datetime) -> str:
    """The day a report up to `until` is named for: a report up to midnight (a scheduled daily run's
    time) covers the day that just ended, not the one that has only begun."""
    at_midnight = (until.hour, until.minute, until.second, until.microsecond) == (0, 0, 0, 0)
    return (until - timedelta(days=1) if at_midnight else until).date().isoformat()


def render_daily_report(
    out_dir: Path, history_url: str | None = None, days: int = DAYS, as_of: datetime | str | None = None
) -> Path:
    """Write `<out_dir>/reports/daily-<date of as_of>.html` over the runs of the `days` days up to `as_of`.

    `history_url` None means $REPLICA_AUDIT_HISTORY, else `<out_dir>/history.sqlite` (as for the runs).
    """
    from audit.report.html import environment

    if days < 1:
        raise ConfigError(f"daily report: days must be at least 1, got {days}")
    out = Path(out_dir)
    until_dt = _as_of(as_of)
    since_dt = until_dt - timedelta(days=days)
    since, until = format_time(since_dt), format_time(until_dt)
    assert since is not None and until is not None
    url = history_of(history_url)
    with open_history(url, out=out) as store:
        runs = [r for r in store.runs(since=since) if r["started_at"] and r["started_at"] <= until]
        trends = [t for name in _pair_names(store, runs, out) if (t := pair_trend(store, name, out, since, until))]
        where = store.where
    verdicts: dict[str, int] = {}
    for r in runs:
        verdicts[str(r["verdict"])] = verdicts.get(str(r["verdict"]), 0) + 1
    day = report_day(until_dt)
    path = out / REPORTS_DIR / f"daily-{day}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    html = (
        environment()
        .get_template("daily.html.j2")
        .render(
            day=day,
            since=since,
            until=until,
            days=days,
            runs=runs,
            verdicts=verdicts,
            trends=trends,
            store=where,
            recent=RECENT_RUNS,
            generated_at=datetime.now(UTC).strftime(TIME_FORMAT),
        )
    )
    write_text(path, html)  # atomic: a reader sees the last report or this one, never half
    return path
