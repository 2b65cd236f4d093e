"""The order-keeping step of the Pika binlog alignment (audit/sources/pika/binlog_order.py), its pure parts:
the chain of segments it keeps, what it drops and where it pairs again, and the subsequence it pairs by.
The whole step runs on real logs in tests/unit/test_pika_alignment.py, against tests/pika_oracle.py."""

from __future__ import annotations

import itertools
import random

from audit.sources.pika import binlog_order
from audit.sources.pika.binlog_order import (
    Region,
    Segment,
    dropped_segments,
    heaviest_chain,
    lcs_pairs,
    regions_between_long_segments,
)
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


def test_regions_lie_between_long_segments(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(binlog_order, "SMALL_SEGMENT", 100)
    segs = [seg(0, 0, 500), seg(500, 510, 20), seg(530, 520, 300), seg(900, 880, 50)]
    # the 20 and the 50 may sit at a chance shift: what lies between the long ones pairs again as a whole
    assert regions_between_long_segments(segs) == [
        Region(0, -1, 0, -1, 0),
        Region(0, 499, 530, 499, 520),
        Region(0, 829, None, 819, None),
    ]
    assert regions_between_long_segments([seg(0, 0, 50)]) == [Region(0, -1, None, -1, None)]


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


def test_lcs_pairs_pair_early_so_the_masters_unpaired_records_come_last() -> None:
    # A slave 3 behind, inside a loop of one INCR: pairing its copies with the master's last ones would
    # turn the lag into a loss at the loop's start.
    assert lcs_pairs([1, 2, 2, 2, 2, 2], [1, 2, 2]) == [(0, 0), (1, 1), (2, 2)]
    assert lcs_pairs([5, 7, 7, 9], [5, 7, 9, 7]) == [(0, 0), (1, 1), (2, 3)]
    # a slave record nothing pairs with, before the slave's copies of a loop: they pair from its start
    assert lcs_pairs([3, 4, 4, 4, 4], [3, 8, 4, 4]) == [(0, 0), (1, 2), (2, 3)]


def test_a_window_too_big_for_the_exact_subsequence_still_pairs_in_order(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(binlog_order, "EXACT_LCS_CELLS", 10)
    a = [1, 2, 3, 3, 3, 4, 5, 6]
    b = [1, 2, 3, 3, 4, 9, 5, 6]
    pairs = lcs_pairs(a, b)
    assert all(a[i] == b[j] for i, j in pairs)
    assert _in_order(pairs)
    assert len(pairs) == 7
