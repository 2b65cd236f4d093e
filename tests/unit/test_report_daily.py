"""audit/report/daily.py: which day a daily report is named for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.report.daily import report_day


@pytest.mark.parametrize(
    ("until", "day"),
    [
        (datetime(2026, 11, 25, 0, 0, tzinfo=UTC), "2026-11-24"),  # a scheduled @daily run: the day that ended
        (datetime(2026, 11, 25, 0, 0, 1, tzinfo=UTC), "2026-11-25"),
        (datetime(2026, 11, 25, 14, 30, tzinfo=UTC), "2026-11-25"),  # triggered by hand: today so far
    ],
)
def test_a_report_up_to_midnight_is_the_report_of_the_day_that_ended(until: datetime, day: str) -> None:
    assert report_day(until) == day


def test_as_of_a_date_is_the_report_of_that_whole_day() -> None:
    from audit.report.daily import _as_of

    until = _as_of("2026-11-24")
    assert until == datetime(2026, 11, 25, tzinfo=UTC) and report_day(until) == "2026-11-24"
    assert _as_of("2026-11-24T13:00:00Z") == datetime(2026, 11, 24, 13, tzinfo=UTC)
