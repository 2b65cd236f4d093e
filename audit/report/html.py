"""report.html: the human view of summary.json, rendered with Jinja2; plots are inline PNGs."""

from __future__ import annotations

import base64
import io
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from audit.layout import RunDir


def _env() -> Environment:
    env = Environment(loader=PackageLoader("audit", "report/templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = lambda v: f"{v:,}" if isinstance(v, int) else ("" if v is None else v)
    return env


def category_chart(counts: dict[str, int]) -> str | None:
    """A horizontal bar chart of findings per category, as a data: URI, or None when there are none."""
    if not counts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = sorted(counts.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(items) + 0.8))
    ax.barh([k for k, _ in items], [v for _, v in items], color="#c0392b")
    ax.set_xlabel("findings")
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v}", va="center")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def render_report(run: RunDir, summary: dict[str, Any]) -> None:
    charts = {p["pair"]: category_chart(p.get("counts", {})) for p in summary["pairs"]}
    html = _env().get_template("report.html.j2").render(summary=summary, charts=charts)
    run.report.write_text(html)
