"""Print a run summary to the terminal with rich."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

_STYLE = {"passed": "green", "failed": "red", "error": "magenta", "incomplete": "magenta"}


def print_summary(console: Console, summary: dict[str, Any], run_root: Path) -> None:
    table = Table(title=escape(f"run {summary['run_id']}: {summary['verdict']}"))
    for col in ("pair", "verdict", "findings", "diagnoses", "coverage"):
        table.add_column(col)
    for p in summary["pairs"]:
        counts = "\n".join(f"{c}: {n}" for c, n in sorted(p["counts"].items())) or "none"
        diags = "\n".join(f"{code} ×{d['count']}" for code, d in p["diagnoses"].items()) or "-"
        cov = p.get("coverage", {})
        coverage = _compared(cov)
        if p["not_covered"]:
            coverage += ("\n" if coverage else "") + "NOT covered: " + "; ".join(p["not_covered"])
        for name, why in p["skipped_checks"].items():
            coverage += f"\nskipped {name}: {why}"
        style = _STYLE.get(p["status"], "")
        # what a server or a file said may hold brackets (`[host:port, ...]`), which rich reads as markup
        table.add_row(escape(p["pair"]), f"[{style}]{p['status']}[/]", escape(counts), escape(diags), escape(coverage))
    console.print(table)
    for p in summary["pairs"]:
        for f in (p.get("gate") or {}).get("failed", []):
            console.print(
                f"  {escape(p['pair'])}: gate failed on [bold]{escape(str(f['column']))}[/] = {f['observed']} "
                f"(max {f['threshold']}): {escape(str(f['meaning']))}"
            )
    for p in summary.get("pairs_not_in_this_summary", []):
        console.print(f"  {escape(p['pair'])}: in this run but not in this summary; its state: [bold]{p['status']}[/]")
    console.print(escape(f"report: {run_root / 'report.html'}"))
    console.print(escape(f"summary: {run_root / 'summary.json'}"))


def _compared(coverage: dict[str, Any]) -> str:
    """`keys_compared: 100` -> "100 keys compared", whatever a kind compares (rows, records, keys)."""
    items = [(k.removesuffix("_compared").replace("_", " "), v) for k, v in coverage.items() if k.endswith("_compared")]
    return "\n".join(f"{int(v or 0):,} {what} compared" for what, v in items)
