"""The plots of report.html and the daily report: matplotlib (Agg) figures inlined as PNG data: URIs.

Every function returns None when there is nothing to draw, so a template shows a chart only when it
says something. matplotlib is imported on first use: loading the report package stays cheap.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from audit.background import Preload

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
SIDE_COLORS = {"master": "#2471a3", "replica": "#d35400"}
SEVERITY_COLORS = {"critical": "#c0392b", "warning": "#e0a100", "info": "#5d8aa8"}
"""One colour per finding severity, shared with the pages' CSS (style.css.j2): red, amber, steel blue."""
SEVERITIES = ("critical", "warning", "info")
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _load_matplotlib() -> None:
    """matplotlib with the Agg backend, its figure module and its font list: the cost of a first chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.font_manager


PRELOAD = Preload("charts-warm-up", _load_matplotlib)
"""matplotlib (about a second), started by `run` while the first stages run; the first chart waits for it."""


def _figure(width: float, height: float) -> Figure:
    PRELOAD.wait()
    _load_matplotlib()
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


def binary_unit(largest: float) -> tuple[str, float]:
    """The binary prefix for values up to `largest` bytes: ("MiB", 1048576.0) for 5e6."""
    exponent = 0
    while exponent < len(BINARY_UNITS) - 1 and abs(largest) >= 1024.0 ** (exponent + 1):
        exponent += 1
    return BINARY_UNITS[exponent], 1024.0**exponent


def format_bytes(value: float | None) -> str:
    """`1.5 GiB`, `812 B`: a byte count with a binary prefix, three significant digits."""
    if value is None:
        return ""
    unit, scale = binary_unit(value)
    return f"{value:,.0f} B" if unit == "B" else f"{value / scale:.3g} {unit}"


def _unit_number(x: float) -> str:
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.2f}".rstrip("0").rstrip(".")


def _byte_axis(axis: Any, values: Sequence[float]) -> None:
    """Tick labels in binary units (`1.25 GiB`) at round positions of that unit.

    The unit follows the spread of the values when it is small beside their size (offsets of 1.2 GiB
    that differ by a few KiB are labelled in KiB, exact), and whole bytes below 1 KiB: no half-bytes.
    """
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    finite = [v for v in values if v == v]
    unit, scale = binary_unit(max((abs(v) for v in finite), default=0.0))
    spread = max(finite, default=0.0) - min(finite, default=0.0)
    if 0 < spread < scale:
        unit, scale = binary_unit(spread)
    if unit == "B":
        axis.set_major_locator(MaxNLocator(nbins=5, integer=True))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f} B"))
        return

    class UnitLocator(MaxNLocator):  # type: ignore[misc]
        def tick_values(self, vmin: float, vmax: float) -> Any:
            import numpy as np

            return np.asarray(super().tick_values(vmin / scale, vmax / scale)) * scale

    axis.set_major_locator(UnitLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{_unit_number(v / scale)} {unit}"))


def _run_ticks(ax: Any, labels: Sequence[str]) -> None:
    step = max(1, -(-len(labels) // MAX_TICK_LABELS))
    ticks = list(range(0, len(labels), step))
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels[i] for i in ticks], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.75, max(len(labels), 6) - 0.25)  # a few runs make narrow bars, not one wide block


def category_bars(counts: dict[str, int], severities: Mapping[str, str] | None = None) -> str | None:
    """Findings per category of one run, horizontal bars with their numbers, coloured by the category's severity."""
    if not counts:
        return None
    severities = severities or {}
    items = sorted(counts.items(), key=lambda kv: kv[1])
    fig = _figure(6, 0.4 * len(items) + 0.9)
    ax = fig.subplots()
    colors = [SEVERITY_COLORS.get(severities.get(k, "critical"), PALETTE[0]) for k, _ in items]
    ax.barh([k for k, _ in items], [v for _, v in items], color=colors)
    ax.set_xlabel("findings")
    ax.xaxis.set_major_locator(_integer_locator())
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v:,}", va="center")
    ax.margins(x=0.15)
    shown = [s for s in SEVERITIES if s in {severities.get(k, "critical") for k, _ in items}]
    if len(shown) > 1:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=SEVERITY_COLORS[s], label=s) for s in shown], fontsize=7, loc="lower right")
    return png_uri(fig)


def findings_per_run(
    labels: Sequence[str], by_severity: Mapping[str, Sequence[int | None]], current: int | None = None
) -> str | None:
    """Findings per run stacked by severity; runs that did not finish are marked ✕, this run outlined."""
    if len(labels) == 0:
        return None
    fig = _figure(8, 2.8)
    ax = fig.subplots()
    xs = list(range(len(labels)))
    bottom = [0] * len(labels)
    for severity in SEVERITIES:
        values = by_severity.get(severity)
        if values is None:
            continue
        heights = [v or 0 for v in values]
        ax.bar(xs, heights, bottom=bottom, color=SEVERITY_COLORS[severity], label=severity, width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    unfinished = [i for i in xs if all((v[i] is None) for v in by_severity.values())] if by_severity else []
    if unfinished:
        ax.scatter(unfinished, [0] * len(unfinished), marker="x", color="#8e44ad", label="not audited", zorder=3)
    if current is not None:
        ax.bar([current], [max(bottom[current], 0)], width=0.85, fill=False, edgecolor="#222", linewidth=1.5)
        ax.annotate(
            "this run", (current, bottom[current]), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7
        )
    ax.set_ylabel("findings")
    ax.yaxis.set_major_locator(_integer_locator())
    ax.set_ylim(0, max(max(bottom, default=0), 1) * 1.2)
    _run_ticks(ax, labels)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
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
    """Replication lag per run: bytes (left axis, binary units) and seconds since the master was last heard (right)."""
    if not any(v is not None for v in (*lag_bytes, *lag_seconds)):
        return None
    fig = _figure(8, 2.8)
    ax = fig.subplots()
    xs = list(range(len(labels)))
    ax.plot(xs, _nan(lag_bytes), marker="o", color=PALETTE[1], label="lag bytes")
    ax.set_ylabel("lag")
    _byte_axis(ax.yaxis, [v for v in lag_bytes if v is not None])
    twin = ax.twinx()
    twin.plot(xs, _nan(lag_seconds), marker="s", linestyle="--", color=PALETTE[3], label="lag seconds")
    twin.set_ylabel("seconds")
    _run_ticks(ax, labels)
    lines = ax.get_lines() + twin.get_lines()
    ax.legend(lines, [str(ln.get_label()) for ln in lines], fontsize=7, loc="upper left")
    return png_uri(fig)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def offsets_over_time(
    labels: Sequence[str],
    master: Sequence[float | None],
    replica: Sequence[float | None],
    unit: str,
    seconds: Sequence[float] | None = None,
) -> str | None:
    """Master's and replica's offsets (top) and the gap between them (bottom), over samples or runs.

    Offsets of a healthy pair are nearly equal and large, so on one axis the two lines coincide: the
    gap panel shows what separates them. `seconds` (time of each sample) puts samples at their real
    times; without it the points are runs, one per label.
    """
    if not any(v is not None for v in master) or not any(v is not None for v in replica):
        return None
    fig = _figure(8, 3.6)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    xs = list(seconds) if seconds is not None else list(range(len(labels)))
    top.plot(
        xs, _nan(master), color=SIDE_COLORS["master"], label="master", marker="o", linewidth=4, alpha=0.5, markersize=9
    )
    top.plot(xs, _nan(replica), color=SIDE_COLORS["replica"], label="replica", marker="s", linestyle="--")
    _byte_axis(top.yaxis, [v for v in (*master, *replica) if v is not None])
    top.set_ylabel(unit.replace(" (bytes)", ""), fontsize=8)
    top.legend(fontsize=7, loc="upper left")
    gaps = [m - r if m is not None and r is not None else None for m, r in zip(master, replica, strict=True)]
    width = (max(xs) - min(xs)) / max(len(xs), 2) * 0.5 if seconds is not None and len(xs) > 1 else 0.6
    bottom.bar(xs, [g or 0 for g in gaps], width=width or 0.6, color="#7f8c8d")
    bottom.axhline(0, color="#444", linewidth=0.8)
    if any(gaps):
        _byte_axis(bottom.yaxis, [g for g in gaps if g is not None])
    else:  # equal at every sample: one tick, no "-0 B"
        bottom.set_ylim(-1, 1)
        bottom.set_yticks([0], ["0 B"])
    bottom.set_ylabel("master − replica", fontsize=8)
    for x, g in zip(xs, gaps, strict=True):
        if g is not None:
            bottom.annotate(format_bytes(g), (x, g), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    if seconds is not None:
        bottom.set_xlabel("seconds since the first sample", fontsize=8)
        bottom.margins(x=0.15)
    else:
        _run_ticks(bottom, labels)
    bottom.margins(y=0.35)
    return png_uri(fig)


def offsets_by_db(offsets: dict[str, dict[str, float | None]], unit: str) -> str | None:
    """Grouped bars per db (or per log): the master's offset next to the replica's, the gap written above."""
    rows = [(db, o.get("master"), o.get("replica")) for db, o in sorted(offsets.items())]
    if not rows:
        return None
    fig = _figure(max(4.0, 1.5 + 1.0 * len(rows)), 3.0)
    ax = fig.subplots()
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [m or 0 for _, m, _ in rows], width=0.4, color=SIDE_COLORS["master"], label="master")
    ax.bar(
        [x + 0.2 for x in xs], [r or 0 for _, _, r in rows], width=0.4, color=SIDE_COLORS["replica"], label="replica"
    )
    for x, (_, m, r) in zip(xs, rows, strict=True):
        if m is not None and r is not None:
            text = "equal" if m == r else f"Δ {format_bytes(m - r)}"
            ax.annotate(text, (x, max(m, r)), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([db for db, _, _ in rows], fontsize=8)
    _byte_axis(ax.yaxis, [v for _, m, r in rows for v in (m, r) if v is not None])
    ax.set_ylabel(unit.replace(" (bytes)", ""), fontsize=8)
    ax.margins(y=0.15)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png_uri(fig)
