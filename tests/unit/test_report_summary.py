"""audit/report/summary.py: how a finding's key is shown, so no two keys read alike."""

from __future__ import annotations

import pytest

from audit.report.summary import display_key, key_shape


@pytest.mark.parametrize(
    ("key", "shown", "shape"),
    [
        (b"user:1", "user:1", {}),
        (b"\x00\x01\xfe", "0x0001fe", {"key_hex": True}),
        (b"0x0001fe", "0x0001fe", {}),  # a key that is this text: shown the same, but not marked as bytes
        ("é<b>".encode(), "é<b>", {}),
        (b"k" * 300, "k" * 200 + "…", {"key_bytes": 300}),
        (b"\xff" * 150, "0x" + "ff" * 100 + "…", {"key_hex": True, "key_bytes": 150}),
        (b"0x" + b"a" * 300, "0x" + "a" * 198 + "…", {"key_bytes": 302}),  # long text that starts like hex
    ],
)
def test_a_key_is_shown_with_what_tells_it_apart(key: bytes, shown: str, shape: dict[str, object]) -> None:
    assert display_key(key) == shown
    assert key_shape(key) == shape


def test_compared_lines_say_one_thing_in_the_singular() -> None:
    from audit.report.summary import compared_lines

    coverage = {"tables_compared": 1, "rows_compared": 1200, "bytes_compared": 0, "keys_compared": 1, "other": 1}
    assert compared_lines(coverage) == ["1 table compared", "1,200 rows compared", "0 bytes compared", "1 key compared"]
