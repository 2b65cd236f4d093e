"""A finding's `detail` (its evidence as JSON) as labelled fields a person reads.

    finding_view({"master": {"type": "string", "ttl_ms": 600000, ...}, "replica": {...}, "ttl_delta_ms": 600000})
    -> sides: [("Type", "string", "string"), ("TTL", "600 s", "1,200 s"), ("Expires", "2026-11-21 10:10:00Z", ...)]
       fields: [("TTL difference", "+600 s (the replica's copy expires later)"), ...]

Conventions of the evidence keys, which every source kind follows: `*_at_ms` and `*_time_ms` are
epoch milliseconds (shown as UTC times), other `*_ms` are durations, `*_s`/`*_seconds` seconds,
`bytes`/`*_bytes` byte counts (shown with binary units and exact), `master`/`replica` objects are
what each side holds (shown side by side), `fields` lists the parts of a value that differ
(`{total, exact, items: [{<field|member|member_xxh3|index|offset>, state, master, replica}]}`). Whatever else
there is shows as `key: value`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from audit.report.charts import format_bytes

SIDE_FIELDS = (
    ("type", "Type"),
    ("length", "Length"),
    ("ttl_ms", "TTL"),
    ("expire_at_ms", "Expires"),
    ("status", "Read"),
)
"""The per-side fields of a keyspace finding, in the order shown."""

LABELS = {
    "ttl_delta_ms": "TTL difference",
    "lag_bytes": "Lag",
    "max_lag_bytes": "Lag threshold",
    "replica_node": "Replica",
}
DIGEST_SHOWN = 12
"""Hex digits of a digest shown in the table; the full digest is in the cell's title."""


@dataclass
class FindingView:
    sides: list[tuple[str, str, str]] = field(default_factory=list)
    """(label, master, replica)."""
    fields: list[tuple[str, str]] = field(default_factory=list)
    """(label, value)."""


def label(key: str) -> str:
    """`rechecked_rounds` -> `Rechecked rounds`; the unit suffixes are dropped (the value carries the unit)."""
    if key in LABELS:
        return LABELS[key]
    for suffix in ("_at_ms", "_time_ms", "_ms", "_seconds", "_s"):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)] + (" at" if suffix in ("_at_ms", "_time_ms") else "")
            break
    text = key.replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def epoch_ms(value: Any) -> str:
    """Epoch milliseconds as `2026-11-21 10:00:00.123Z` (UTC)."""
    try:
        moment = datetime.fromtimestamp(float(value) / 1000.0, tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def duration_ms(value: Any, signed: bool = False) -> str:
    """Milliseconds as seconds: `600 s`, `1.5 s`, `+2 ms` (signed for differences)."""
    try:
        ms = float(value)
    except (TypeError, ValueError):
        return str(value)
    sign = "+" if signed and ms > 0 else ""
    if abs(ms) < 1000:
        return f"{sign}{ms:,.0f} ms"
    seconds = ms / 1000.0
    return f"{sign}{seconds:,.0f} s" if seconds.is_integer() or abs(seconds) >= 100 else f"{sign}{seconds:,.1f} s"


def byte_count(value: Any) -> str:
    try:
        n = float(value)
    except (TypeError, ValueError):
        return str(value)
    exact = f"{n:,.0f} bytes"
    shown = format_bytes(n)
    return exact if shown.endswith(" B") else f"{shown} ({exact})"


def value_text(key: str, value: Any) -> str:
    """One evidence value, formatted by what its key says it is."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith(("_at_ms", "_time_ms")):
        return epoch_ms(value)
    if key.endswith("_ms") and isinstance(value, int | float):
        return duration_ms(value, signed=key.endswith("delta_ms"))
    if key.endswith(("_s", "_seconds")) and isinstance(value, int | float):
        return f"{value:,g} s"
    if (key == "bytes" or key.endswith("_bytes")) and isinstance(value, int | float):
        return byte_count(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, list | tuple):
        return ", ".join(value_text(key, v) for v in value) or "–"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


_PART_NAMES = ("field", "member", "member_xxh3", "index", "offset")


def parts_text(fields: dict[str, Any]) -> str:
    """`detail.fields` as one line: how many parts differ, then each listed one with both sides' values."""
    items = fields.get("items") or []
    total = fields.get("total", len(items))
    head = f"{total:,} differ" + ("" if fields.get("exact", True) else " (at least)")
    if "error" in fields:
        return f"not compared: {fields['error']}"
    shown = []
    for item in items:
        part = next((f"{n.replace('_', ' ')} {item[n]}" for n in _PART_NAMES if n in item), "?")
        values = ""
        if item.get("master") is not None or item.get("replica") is not None:
            values = f" (master {item.get('master') or '–'}, replica {item.get('replica') or '–'})"
        shown.append(f"{part} {str(item.get('state', '')).replace('_', ' ')}{values}")
    more = f"; … {total - len(items):,} more" if isinstance(total, int) and total > len(items) else ""
    return head + (": " + "; ".join(shown) if shown else "") + more


def _side_value(key: str, side: dict[str, Any]) -> str:
    if key == "ttl_ms" and side.get(key) is None and side.get("type") not in (None, "none"):
        return "no expiry"
    if key == "expire_at_ms" and side.get(key) is None:
        return "–"
    if key == "length" and isinstance(side.get(key), int):
        return f"{side[key]:,}"
    return value_text(key, side.get(key))


def ttl_difference(delta_ms: Any) -> str:
    text = duration_ms(delta_ms, signed=True)
    try:
        later = float(delta_ms)
    except (TypeError, ValueError):
        return text
    if later > 0:
        return f"{text} (the replica's copy expires later)"
    if later < 0:
        return f"{text} (the replica's copy expires sooner)"
    return text


def finding_view(detail: dict[str, Any]) -> FindingView:
    """What a finding's detail shows: the sides next to each other, then every other field labelled."""
    view = FindingView()
    master, replica = detail.get("master"), detail.get("replica")
    if isinstance(master, dict) and isinstance(replica, dict):
        for key, name in SIDE_FIELDS:
            if key in master or key in replica:
                view.sides.append((name, _side_value(key, master), _side_value(key, replica)))
    for key, value in sorted(detail.items()):
        if key in ("master", "replica") and view.sides:
            continue
        if key == "ttl_delta_ms":
            if value is not None:
                view.fields.insert(0, (label(key), ttl_difference(value)))
            continue
        if key == "fields" and isinstance(value, dict):
            view.fields.append(("Differing parts", parts_text(value)))
            continue
        view.fields.append((label(key), value_text(key, value)))
    return view


def short_digest(digest: str | None) -> str:
    if not digest:
        return ""
    return digest if len(digest) <= DIGEST_SHOWN + 1 else digest[:DIGEST_SHOWN] + "…"
