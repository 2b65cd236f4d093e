"""The plots of report.html and the daily report: matplotlib (Agg) figures inlined as PNG data: URIs.

Every function returns None when there is nothing to draw, so a template shows a chart only when it
says something. matplotlib is imported on first use: loading the report package stays cheap.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_TICK_LABELS = 12
"""At most this many run labels on a time axis; the others are left unlabelled."""

PALETTE = (
    "#c0392b",
    "#2980b9",
    "#8e44ad",
    "#d35400",
    "#16a085",
    "#2c3e50",
    "#f39c12",
    "#7f8c8d",
    "#27ae60",
    "#e84393",
    "#00cec9",
    "#6c5ce7",
)
SIDE_COLORS = {"master": "#2980b9", "replica": "#c0392b"}


def _figure(width: float, height: float) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=90)


def png_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _integer_locator() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _run_ticks(ax: Any, labels: Sequence[str]) -> None:
    step = max(1, -(-len(labels) // MAX_TICK_LABELS))
    ticks = list(range(0, len(labels), step))
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels[i] for i in ticks], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.75, max(len(labels), 6) - 0.25)  # a few runs make narrow bars, not one wide block


def category_bars(counts: dict[str, int]) -> str | None:
    """Findings per category of one run, horizontal bars with their numbers."""
    if not counts:
        return None
    items = sorted(counts.items(), key=lambda kv: kv[1])
    fig = _figure(6, 0.4 * len(items) + 0.9)
    ax = fig.subplots()
    ax.barh([k for k, _ in items], [v for _, v in items], color=PALETTE[0])
    ax.set_xlabel("findings")
    ax.xaxis.set_major_locator(_integer_locator())
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v:,}", va="center")
    ax.margins(x=0.15)
    return png_uri(fig)


def categories_over_time(labels: Sequence[str], series: Mapping[str, Sequence[int | None]]) -> str | None:
    """Stacked bars, one per run, one colour per category; runs that did not finish are marked ✕."""
    if not labels or not series:
        return None
    fig = _figure(8, 3.2)
    ax = fig.subplots()
    xs = list(range(len(labels)))
    bottom = [0] * len(labels)
    unfinished = [i for i in xs if all(values[i] is None for values in series.values())]
    for i, (category, values) in enumerate(sorted(series.items())):
        heights = [v or 0 for v in values]
        ax.bar(xs, heights, bottom=bottom, label=category, color=PALETTE[i % len(PALETTE)], width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if unfinished:
        ax.scatter(unfinished, [0] * len(unfinished), marker="x", color="#8e44ad", label="not audited", zorder=3)
    ax.set_ylabel("divergences")
    ax.yaxis.set_major_locator(_integer_locator())
    _run_ticks(ax, labels)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_uri(fig)


def lag_over_time(
    labels: Sequence[str], lag_bytes: Sequence[float | None], lag_seconds: Sequence[float | None]
) -> str | None:
    """Replication lag per run: bytes (left axis) and seconds since the master was last heard (right)."""
    if not any(v is not None for v in (*lag_bytes, *lag_seconds)):
        return None
    fig = _figure(8, 2.8)
    ax = fig.subplots()
    xs = list(range(len(labels)))
    ax.plot(xs, [float("nan") if v is None else v for v in lag_bytes], marker="o", color=PALETTE[1], label="lag bytes")
    ax.set_ylabel("bytes")
    twin = ax.twinx()
    twin.plot(
        xs,
        [float("nan") if v is None else v for v in lag_seconds],
        marker="s",
        linestyle="--",
        color=PALETTE[3],
        label="lag seconds",
    )
    twin.set_ylabel("seconds")
    _run_ticks(ax, labels)
    lines = ax.get_lines() + twin.get_lines()
    ax.legend(lines, [str(ln.get_label()) for ln in lines], fontsize=7, loc="upper left")
    return png_uri(fig)


def offsets_over_time(
    labels: Sequence[str], master: Sequence[float | None], replica: Sequence[float | None], unit: str
) -> str | None:
    """Master's and replica's offsets side by side over samples or runs: a gap is lag, a crossing is a replay."""
    if not any(v is not None for v in master) or not any(v is not None for v in replica):
        return None
    fig = _figure(8, 2.8)
    ax = fig.subplots()
    xs = list(range(len(labels)))
    # the master drawn wide and pale under the replica: equal offsets still show both
    styles: tuple[tuple[str, Sequence[float | None], dict[str, Any]], ...] = (
        ("master", master, {"marker": "o", "linewidth": 5, "markersize": 10, "alpha": 0.45}),
        ("replica", replica, {"marker": "s", "linewidth": 1.5, "linestyle": "--"}),
    )
    for side, values, style in styles:
        ax.plot(xs, [float("nan") if v is None else v for v in values], color=SIDE_COLORS[side], label=side, **style)
    ax.set_ylabel(unit)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    _run_ticks(ax, labels)
    ax.legend(fontsize=7, loc="upper left")
    return png_uri(fig)


def offsets_by_db(offsets: dict[str, dict[str, float | None]], unit: str) -> str | None:
    """Grouped bars per db (or per log): the master's offset next to the replica's."""
    rows = [(db, o.get("master"), o.get("replica")) for db, o in sorted(offsets.items())]
    if not rows:
        return None
    fig = _figure(max(4.0, 1.0 + 0.9 * len(rows)), 2.8)
    ax = fig.subplots()
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [m or 0 for _, m, _ in rows], width=0.4, color=SIDE_COLORS["master"], label="master")
    ax.bar(
        [x + 0.2 for x in xs], [r or 0 for _, _, r in rows], width=0.4, color=SIDE_COLORS["replica"], label="replica"
    )
    ax.set_xticks(xs)
    ax.set_xticklabels([db for db, _, _ in rows], fontsize=8)
    ax.set_ylabel(unit)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.legend(fontsize=7)
    return png_uri(fig)
