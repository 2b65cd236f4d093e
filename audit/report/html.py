"""report.html: the human view of one run's summary.json, rendered with Jinja2; plots are inline PNGs.

Per pair: verdict, endpoints and versions, coverage, the gate with links to its GX Data Docs (through
the run's `gate/data_docs` link to the output directory's shared site, see audit/gate/gx.py),
diagnoses, a chart of findings per category (coloured by severity), findings per run from the
results history, master vs replica offsets when the run measured them, and the first findings of
each category with the category's total, their details as labelled fields.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from audit.findings import SEVERITY_BY_CATEGORY
from audit.layout import TIME_FORMAT, RunDir, write_text
from audit.report import charts
from audit.report.detail import finding_view, short_digest
from audit.report.offsets import Offsets, run_offsets

HISTORY_RUNS = 30
"""Runs of the pair shown in report.html's findings-per-run chart (this one included)."""


def _num(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return "" if value is None else value
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.3f}"
    return value


def environment() -> Environment:
    """The Jinja environment of every replica-audit page (report, daily report, certificate)."""
    env = Environment(loader=PackageLoader("audit", "report/templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = _num
    env.filters["bytes"] = charts.format_bytes
    env.filters["digest"] = short_digest
    env.globals["severity_of"] = lambda category: SEVERITY_BY_CATEGORY.get(str(category), "critical")
    return env


def category_chart(counts: dict[str, int]) -> str | None:
    """A horizontal bar chart of findings per category, coloured by severity, as a data: URI (None when none)."""
    return charts.category_bars(counts, SEVERITY_BY_CATEGORY)


def data_docs_links(run_root: Path, pair: str, gate: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, path relative to the run directory) of the GX Data Docs pages about this pair's gate that exist."""
    from audit.gate.gx import run_name

    links: list[tuple[str, str]] = []
    docs = run_root / "gate" / "data_docs"
    index = (gate or {}).get("data_docs")
    if index and (run_root / index).exists():
        links.append(("Data Docs index", index))
    pages = sorted(docs.glob(f"validations/*/{run_name(run_root.name, pair)}/*/*.html"), key=lambda p: p.parent.name)
    if pages:
        links.append(("validation result", pages[-1].relative_to(run_root).as_posix()))
        suite = docs / "expectations" / f"{pages[-1].parents[2].name}.html"
        if suite.is_file():
            links.append(("expectation suite", suite.relative_to(run_root).as_posix()))
    return links


def offsets_charts(offsets: Offsets | None) -> list[str]:
    if offsets is None:
        return []
    found = []
    if len(offsets.samples) > 1:
        t0 = offsets.samples[0][0]
        seconds = [(at - t0) / 1000 for at, _, _ in offsets.samples]
        labels = [f"+{s:.1f}s" for s in seconds]
        master = [m for _, m, _ in offsets.samples]
        replica = [r for _, _, r in offsets.samples]
        found.append(charts.offsets_over_time(labels, master, replica, offsets.unit, seconds=seconds))
    if offsets.by_db:
        found.append(charts.offsets_by_db(offsets.by_db, offsets.unit))
    return [c for c in found if c]


def _severity_counts(counts: dict[str, Any] | None) -> dict[str, int]:
    totals: dict[str, int] = {}
    for category, n in (counts or {}).items():
        severity = SEVERITY_BY_CATEGORY.get(category, "critical")
        totals[severity] = totals.get(severity, 0) + int(n or 0)
    return totals


def _run_label(started_at: str) -> str:
    """`2026-11-21T10:00:00Z` -> `11-21 10:00`; anything else as it is."""
    try:
        return datetime.strptime(started_at, TIME_FORMAT).strftime("%m-%d %H:%M")
    except ValueError:
        return started_at


def history_chart(previous: list[dict[str, Any]], p: dict[str, Any], run_id: str) -> str | None:
    """Findings per run by severity: the pair's previous runs from the history store, then this one."""
    runs = [h for h in previous if h.get("run_id") != run_id][-(HISTORY_RUNS - 1) :]
    entries = [(h.get("started_at") or h["run_id"], h.get("status"), h.get("counts")) for h in runs]
    entries.append(("this run", p.get("status"), p.get("counts")))
    by_severity: dict[str, list[int | None]] = {s: [] for s in charts.SEVERITIES}
    for _, status, counts in entries:
        totals = _severity_counts(counts)
        for severity, values in by_severity.items():
            values.append(None if status in ("error", "incomplete") else totals.get(severity, 0))
    labels = [_run_label(label) for label, _, _ in entries]
    return charts.findings_per_run(labels, by_severity, current=len(entries) - 1)


def pair_histories(run: RunDir, pairs: list[str], history: str | None) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """Each pair's previous runs from the history store; a store that cannot be read gives none, and says why."""
    from audit.errors import AuditError
    from audit.history import history_url, open_history

    url = history_url(history)
    if not url and not (run.out / "history.sqlite").exists():
        return {}, "no results history yet"
    try:
        with open_history(url, out=run.out) as store:
            return {p: store.pair_history(p, limit=HISTORY_RUNS) for p in pairs}, ""
    except AuditError as e:
        return {}, f"results history not read: {e}"


def findings_views(p: dict[str, Any]) -> dict[str, list[Any]]:
    """Per category, the detail of each listed finding as labelled fields."""
    return {
        category: [finding_view(f.get("detail") or {}) for f in rows]
        for category, rows in (p.get("findings_sample") or {}).items()
    }


def _manifest(run: RunDir) -> dict[str, Any]:
    return run.load_manifest()


def pair_view(run: RunDir, p: dict[str, Any], previous: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the template shows for one pair beyond its summary entry."""
    offsets = run_offsets(p)
    last_master, last_replica = offsets.last if offsets else (None, None)
    return {
        "category_chart": category_chart(p.get("counts", {})),
        "history_chart": history_chart(previous or [], p, run.run_id),
        "offsets_charts": offsets_charts(offsets),
        "offsets": offsets,
        "offset_gap": (last_master - last_replica) if last_master is not None and last_replica is not None else None,
        "data_docs": data_docs_links(run.root, p["pair"], p.get("gate")),
        "findings_total": sum(int(n) for n in p.get("counts", {}).values()),
        "details": findings_views(p),
        "severity_counts": _severity_counts(p.get("counts")),
    }


def render_report(run: RunDir, summary: dict[str, Any], history: str | None = None) -> None:
    """Write report.html. `history` is the results store's URL (None: $REPLICA_AUDIT_HISTORY, else OUT's sqlite)."""
    previous, history_note = pair_histories(run, [p["pair"] for p in summary["pairs"]], history)
    views = {p["pair"]: pair_view(run, p, previous.get(p["pair"])) for p in summary["pairs"]}
    html = (
        environment()
        .get_template("report.html.j2")
        .render(
            summary=summary,
            views=views,
            manifest=_manifest(run),
            history_note=history_note,
            generated_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
    )
    write_text(run.report, html)  # atomic: a crash mid-write leaves the previous report whole
