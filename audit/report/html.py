"""report.html: the human view of one run's summary.json, rendered with Jinja2; plots are inline PNGs.

Per pair: verdict, endpoints and versions, coverage, the gate with links to its GX Data Docs (paths
relative to the run directory, so the folder can be copied or served as is), diagnoses, a chart of
findings per category, master vs replica offsets when the run measured them, and the first findings
of each category with the category's total.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from audit.layout import RunDir
from audit.report import charts
from audit.report.offsets import Offsets, run_offsets


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
    return env


def category_chart(counts: dict[str, int]) -> str | None:
    """A horizontal bar chart of findings per category, as a data: URI, or None when there are none."""
    return charts.category_bars(counts)


def data_docs_links(run_root: Path, pair: str, gate: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, path relative to the run directory) of the GX Data Docs pages about this pair that exist."""
    links: list[tuple[str, str]] = []
    docs = run_root / "gate" / "data_docs"
    index = (gate or {}).get("data_docs")
    if index and (run_root / index).exists():
        links.append(("Data Docs index", index))
    pages = sorted(docs.glob(f"validations/*/{pair}/*/*.html"), key=lambda p: p.parent.name)
    if pages:
        links.append(("validation result", pages[-1].relative_to(run_root).as_posix()))
    suites = [p for p in docs.glob("expectations/*.html") if p.stem.endswith(f"-{pair}")]
    if suites:
        links.append(("expectation suite", min(suites).relative_to(run_root).as_posix()))
    return links


def offsets_charts(offsets: Offsets | None) -> list[str]:
    if offsets is None:
        return []
    found = []
    if len(offsets.samples) > 1:
        t0 = offsets.samples[0][0]
        labels = [f"+{(at - t0) / 1000:.1f}s" for at, _, _ in offsets.samples]
        found.append(
            charts.offsets_over_time(
                labels, [m for _, m, _ in offsets.samples], [r for _, _, r in offsets.samples], offsets.unit
            )
        )
    if offsets.by_db:
        found.append(charts.offsets_by_db(offsets.by_db, offsets.unit))
    return [c for c in found if c]


def _manifest(run: RunDir) -> dict[str, Any]:
    if not run.manifest.exists():
        return {}
    loaded: dict[str, Any] = json.loads(run.manifest.read_text())
    return loaded


def pair_view(run: RunDir, p: dict[str, Any]) -> dict[str, Any]:
    """What the template shows for one pair beyond its summary entry."""
    offsets = run_offsets(p)
    last_master, last_replica = offsets.last if offsets else (None, None)
    return {
        "category_chart": charts.category_bars(p.get("counts", {})),
        "offsets_charts": offsets_charts(offsets),
        "offsets": offsets,
        "offset_gap": (last_master - last_replica) if last_master is not None and last_replica is not None else None,
        "data_docs": data_docs_links(run.root, p["pair"], p.get("gate")),
        "findings_total": sum(int(n) for n in p.get("counts", {}).values()),
    }


def render_report(run: RunDir, summary: dict[str, Any]) -> None:
    views = {p["pair"]: pair_view(run, p) for p in summary["pairs"]}
    html = (
        environment()
        .get_template("report.html.j2")
        .render(
            summary=summary,
            views=views,
            manifest=_manifest(run),
            generated_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
    )
    run.report.write_text(html)
