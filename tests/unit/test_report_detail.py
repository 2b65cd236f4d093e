"""A finding's detail as labelled fields, and the byte axes of the offset charts (no server, no browser)."""

from __future__ import annotations

from typing import Any

import pytest

from audit.report import charts
from audit.report.detail import finding_view, label, short_digest, value_text

KEYSPACE_TTL = {
    "master": {"type": "string", "ttl_ms": 3_600_000, "expire_at_ms": 1_795_000_000_000, "length": 17, "status": "ok"},
    "replica": {"type": "string", "ttl_ms": 4_200_000, "expire_at_ms": 1_795_000_600_000, "length": 17, "status": "ok"},
    "ttl_delta_ms": 600_000,
    "rechecked_rounds": 3,
}


def test_keyspace_detail_shows_sides_and_ttl_difference() -> None:
    view = finding_view(KEYSPACE_TTL)
    sides = {name: (m, r) for name, m, r in view.sides}
    assert list(sides) == ["Type", "Length", "TTL", "Expires", "Read"]
    assert sides["TTL"] == ("3,600 s", "4,200 s")
    assert sides["Expires"] == ("2026-11-18 11:06:40.000Z", "2026-11-18 11:16:40.000Z")
    assert sides["Length"] == ("17", "17")
    assert view.fields[0] == ("TTL difference", "+600 s (the replica's copy expires later)")
    assert ("Rechecked rounds", "3") in view.fields


def test_missing_side_and_no_expiry() -> None:
    master = {"type": "hash", "ttl_ms": None, "expire_at_ms": None, "length": 200_000, "status": "ok"}
    replica = {"type": None, "ttl_ms": None, "expire_at_ms": None, "length": None, "status": None}
    sides = {n: (m, r) for n, m, r in finding_view({"master": master, "replica": replica, "ttl_delta_ms": None}).sides}
    assert sides["Type"] == ("hash", "–") and sides["Length"] == ("200,000", "–")
    assert sides["TTL"] == ("no expiry", "–")


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("slave_behind_bytes", 4096, "4 KiB (4,096 bytes)"),
        ("bytes", 812, "812 bytes"),
        ("pause_ms", 1500, "1.5 s"),
        ("pause_ms", 12, "12 ms"),
        ("last_io_seconds", 7, "7 s"),
        ("sampled_at_ms", 0, "1970-01-01 00:00:00.000Z"),
        ("ack_implausible", True, "yes"),
        ("follows", "10.0.0.1:6379", "10.0.0.1:6379"),
        ("files", ["write2file1", "write2file2"], "write2file1, write2file2"),
    ],
)
def test_values_by_what_their_key_says(key: str, value: Any, shown: str) -> None:
    assert value_text(key, value) == shown


def test_labels_and_digests() -> None:
    assert label("slave_behind_bytes") == "Slave behind bytes"
    assert label("expire_at_ms") == "Expire at" and label("pause_ms") == "Pause"
    assert short_digest("0123456789abcdef0123") == "0123456789ab…" and short_digest("abc") == "abc"


def test_binary_units() -> None:
    assert charts.binary_unit(5e6) == ("MiB", 1048576.0)
    assert charts.format_bytes(1536) == "1.5 KiB" and charts.format_bytes(812) == "812 B"
    assert charts.format_bytes(3 * 2**30) == "3 GiB"


def _tick_labels(values: list[float]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1], values)
    charts._byte_axis(ax.yaxis, values)
    fig.canvas.draw()
    return [t.get_text() for t in ax.get_yticklabels() if t.get_text()]


def test_byte_axis_never_shows_half_bytes() -> None:
    labels = _tick_labels([100.0, 103.0])
    assert labels and all(t.endswith(" B") and "." not in t for t in labels), labels


def test_byte_axis_follows_a_small_spread_of_large_offsets() -> None:
    labels = _tick_labels([1_288_490_188.0, 1_288_499_188.0])  # 1.2 GiB apart by 9 KB
    assert labels and all(t.endswith(" KiB") for t in labels), labels
    assert len(set(labels)) == len(labels)  # distinct ticks, not "1.2 GiB" five times


def test_charts_render() -> None:
    uri = charts.findings_per_run(["11-20 10:00", "this run"], {"critical": [3, 5], "info": [0, 1]}, current=1)
    assert uri is not None and uri.startswith("data:image/png;base64,")
    assert charts.findings_per_run([], {}) is None
    assert charts.offsets_over_time(["a", "b"], [1.0, 2.0], [1.0, 2.0], "bytes", seconds=[0.0, 1.0]) is not None


def test_differing_parts_of_a_value_read_as_one_line() -> None:
    from audit.report.detail import finding_view

    fields = {
        "total": 3,
        "exact": False,
        "items": [
            {"field": '"f17"', "state": "differs", "master": '"a"', "replica": '"b"'},
            {"index": 3, "state": "extra_on_replica", "master": None, "replica": None},
        ],
    }
    assert finding_view({"fields": fields}).fields == [
        (
            "Differing parts",
            '3 differ (at least): field "f17" differs (master "a", replica "b"); index 3 extra on replica; … 1 more',
        )
    ]
    assert finding_view({"fields": {"error": "WRONGTYPE"}}).fields == [("Differing parts", "not compared: WRONGTYPE")]
    hidden = {"total": 1, "items": [{"member_xxh3": "00ff", "state": "missing_on_replica"}]}
    shown = "1 differ: member xxh3 00ff missing on replica"
    assert finding_view({"fields": hidden}).fields == [("Differing parts", shown)]
