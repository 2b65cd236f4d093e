"""`replica-audit daily-report`: the results history's trends per pair, as one HTML page (audit/report/daily.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from audit.cli.options import HistoryOpt, OutOpt, err, out


def daily_report(
    out_dir: OutOpt,
    history: HistoryOpt = None,
    days: Annotated[int, typer.Option("--days", help="how many days back")] = 7,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help="end of the window: an ISO time, or a date for that whole day (default now)"),
    ] = None,
) -> None:
    """Render OUT/reports/daily-<date>.html from the results history: trends per pair over the last days."""
    from audit.history import history_url, missing_store
    from audit.report.daily import render_daily_report

    new_out = not Path(out_dir).exists() and not history_url(history)
    new_store = missing_store(history)
    path = render_daily_report(out_dir, history, days, as_of)
    out.print(escape(f"daily report: {path}"))
    if new_out:  # a mistyped OUT: no history there, so the report is empty (not an error: a first day)
        err.print(
            escape(
                f"warning: {out_dir} did not exist: the report holds no runs "
                "(a mistyped -o? --history reads a store elsewhere)"
            )
        )
    elif new_store:  # a mistyped --history: an empty store was just created there
        err.print(
            escape(
                f"warning: history store {new_store} did not exist: the report holds no runs (a mistyped --history? "
                "an empty store is there now, which later reports read quietly: delete it)"
            )
        )
