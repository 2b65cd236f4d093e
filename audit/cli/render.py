"""Print a run summary to the terminal with rich."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from audit.report.summary import compared_lines

_STYLE = {"passed": "green", "failed": "red", "error": "magenta", "incomplete": "magenta"}


def _as_said(text: str, pair: str | None = None) -> str:
    return text


def print_summary(
    console: Console,
    summary: dict[str, Any],
    run_root: Path,
    prose: Callable[[str], str] = _as_said,
    said: Callable[[str, str | None], str] = _as_said,
) -> None:
    """`prose` rewords the auditor's own sentences (gate meanings, skip reasons), `said` a message that
    may quote a server (a verification names the sides source and target: audit/verify.py)."""
    table = Table(title=escape(f"run {summary['run_id']}: {summary['verdict']}"))
    for col in ("pair", "verdict", "findings", "diagnoses", "coverage"):
        table.add_column(col)
    for p in summary["pairs"]:
        counts = "\n".join(f"{c}: {n}" for c, n in sorted(p["counts"].items())) or _no_findings(p["status"])
        diags = "\n".join(f"{code} ×{d['count']}" for code, d in p["diagnoses"].items()) or "-"
        coverage = "\n".join(p.get("compared") or compared_lines(p.get("coverage", {})))
        if p["not_covered"]:
            not_covered = "; ".join(said(w, p["pair"]) for w in p["not_covered"])
            coverage += ("\n" if coverage else "") + "NOT covered: " + not_covered
        for name, why in p["skipped_checks"].items():
            coverage += f"\nskipped {name}: {prose(why)}"
        for limit in p.get("limits") or []:
            coverage += f"\nas asked: {limit}"
        style = _STYLE.get(p["status"], "")
        # what a server or a file said may hold brackets (`[host:port, ...]`), which rich reads as markup
        table.add_row(escape(p["pair"]), f"[{style}]{p['status']}[/]", escape(counts), escape(diags), escape(coverage))
    console.print(table)
    for p in summary["pairs"]:
        for f in (p.get("gate") or {}).get("failed", []):
            console.print(
                f"  {escape(p['pair'])}: gate failed on [bold]{escape(str(f['column']))}[/] = {f['observed']} "
                f"(max {f['threshold']}): {escape(prose(str(f['meaning'])))}"
            )
    for p in summary.get("pairs_not_in_this_summary", []):
        console.print(f"  {escape(p['pair'])}: in this run but not in this summary; its state: [bold]{p['status']}[/]")
    console.print(escape(f"report: {run_root / 'report.html'}"))
    console.print(escape(f"summary: {run_root / 'summary.json'}"))


def _no_findings(status: str) -> str:
    """What an empty findings cell means: none found, or the pair was not (fully) audited."""
    return "none" if status in ("passed", "failed") else "- (not fully audited)"


def print_certificate(console: Console, cert: dict[str, Any], path: Path) -> None:
    """A verification's reasons and its certificate's verdict, below its summary table."""
    for reason in cert["reasons"]:
        console.print(f"  {escape(reason)}")
    if cert["digests_equal"]:
        digests = "digests equal"
    else:
        have = [((cert.get(s) or {}).get("content") or {}).get("digest") for s in ("source", "target")]
        digests = "digests differ" if None not in have else "no content digest for a side"
    console.print(f"certificate: {escape(str(path))} ([bold]{cert['verdict']}[/]; {digests})")
