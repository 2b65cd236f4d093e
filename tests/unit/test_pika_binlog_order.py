"""The order-keeping step of the Pika binlog alignment (audit/sources/pika/binlog_order.py), its pure parts:
the chain of segments it keeps, what it drops and where it pairs again, and the subsequence it pairs by.
The whole step runs on real logs in tests/unit/test_pika_alignment.py, against tests/pika_oracle.py."""

from __future__ import annotations

import itertools
import random

from audit.sources.pika import binlog_order
from audit.sources.pika.binlog_order import Segment, dropped_segments, heaviest_chain, lcs_pairs
from tests.pika_oracle import lcs


def seg(m: int, s: int, n: int) -> Segment:
    return Segment(0, m, s, n)


def test_the_chain_keeps_the_most_records_not_the_most_segments() -> None:
    a, b, c = seg(0, 0, 10), seg(10, 40, 5), seg(15, 10, 20)  # b crosses c; c holds more
    assert heaviest_chain([c, b, a]) == [a, c]


def test_segments_in_order_on_both_sides_are_all_kept() -> None:
    segs = [seg(0, 0, 5), seg(5, 9, 3), seg(20, 12, 7), seg(40, 40, 1)]
    assert heaviest_chain(list(reversed(segs))) == segs


def test_a_short_kept_segment_that_crosses_a_dropped_one_is_dropped_too() -> None:
    # The oracle's seed 1, db 6: a replay of 8 records in a db of repeated records. Position pairs by
    # chance put 17 records at shift 0 (114-130) and 8 at shift 25 (106-113); the chain keeps the 17, and
    # alone it would leave master 106-113 and slave 131-138 with nothing to pair with.
    segs = [seg(0, 0, 52), seg(52, 60, 54), seg(106, 131, 8), seg(114, 114, 17), seg(131, 139, 32)]
    assert sorted(dropped_segments(segs), key=lambda g: g.m_first) == [seg(106, 131, 8), seg(114, 114, 17)]


def test_a_long_segment_that_crosses_a_dropped_one_stays(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(binlog_order, "SMALL_SEGMENT", 100)
    long, wrong, tail = seg(0, 0, 500), seg(500, 700, 3), seg(503, 500, 200)
    assert dropped_segments([long, wrong, tail]) == [wrong]


def test_ordered_segments_need_no_repair() -> None:
    assert dropped_segments([seg(0, 0, 5), seg(5, 9, 3)]) == []


def test_lcs_pairs_are_a_longest_common_subsequence() -> None:
    rng = random.Random(7)
    for _ in range(200):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 30))]
        b = [rng.randrange(4) for _ in range(rng.randrange(0, 30))]
        pairs = lcs_pairs(a, b)
        assert len(pairs) == lcs(a, b)[0]
        assert all(a[i] == b[j] for i, j in pairs)
        assert _in_order(pairs)


def _in_order(pairs: list[tuple[int, int]]) -> bool:
    return all(p[0] < q[0] and p[1] < q[1] for p, q in itertools.pairwise(pairs))


def test_a_window_too_big_for_the_exact_subsequence_still_pairs_in_order(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(binlog_order, "EXACT_LCS_CELLS", 10)
    a = [1, 2, 3, 3, 3, 4, 5, 6]
    b = [1, 2, 3, 3, 4, 9, 5, 6]
    pairs = lcs_pairs(a, b)
    assert all(a[i] == b[j] for i, j in pairs)
    assert _in_order(pairs)
    assert len(pairs) == 7
