from __future__ import annotations

from audit.sources.redis.digest import OrderedDigest, UnorderedDigest, digest_string


def _hash(pages: list[list[bytes]]) -> str:
    d = UnorderedDigest("hash")
    for p in pages:
        d.add_hash_page(p)
    return d.hexdigest()


def test_unordered_types_ignore_order_and_paging() -> None:
    whole = _hash([[b"a", b"1", b"b", b"2", b"c", b"3"]])
    assert whole == _hash([[b"c", b"3"], [b"a", b"1", b"b", b"2"]])
    assert whole != _hash([[b"a", b"1", b"b", b"2", b"c", b"4"]])
    assert whole != _hash([[b"a", b"1", b"b", b"2"]])
    # field/value boundaries matter: (ab, c) is not (a, bc)
    assert _hash([[b"ab", b"c"]]) != _hash([[b"a", b"bc"]])


def test_zset_scores_compare_as_numbers() -> None:
    a, b = UnorderedDigest("zset"), UnorderedDigest("zset")
    a.add_zset_page([b"m", b"1", b"n", b"2.5"])
    b.add_zset_page([b"n", b"2.50", b"m", b"1.0"])
    assert a.hexdigest() == b.hexdigest()


def test_ordered_types_depend_on_order_and_boundaries() -> None:
    def lst(*pages: list[bytes]) -> str:
        d = OrderedDigest("list")
        for p in pages:
            d.add_elements(p)
        return d.hexdigest()

    assert lst([b"a", b"b"], [b"c"]) == lst([b"a"], [b"b", b"c"])
    assert lst([b"a", b"b"]) != lst([b"b", b"a"])
    assert lst([b"ab"]) != lst([b"a", b"b"])


def test_type_is_part_of_the_digest() -> None:
    s, z = UnorderedDigest("set"), UnorderedDigest("zset")
    assert s.hexdigest() != z.hexdigest()
    assert digest_string(b"x") != digest_string(b"y")


def test_digests_are_the_ones_snapshots_have_always_had() -> None:
    """Values computed by the reader before issue 12: snapshots taken before and after stay comparable."""
    from audit.sources.redis.digest import (
        digest_strings,
        hash_hexdigest,
        list_hexdigest,
        set_hexdigest,
        zset_hexdigest,
    )

    assert digest_string(b"hello") == "13ab22b618d93ce1cd3a3fa1c698151b"
    assert digest_strings([b"hello", b""]) == ["13ab22b618d93ce1cd3a3fa1c698151b", "3be84d23fb1096447c64fce6e12d003c"]
    assert _hash([[b"f1", b"v1", b"f2", b"v2"]]) == "4ba2587bb236045c2046dd7ea1e49812"
    assert hash_hexdigest([b"f2", b"v2", b"f1", b"v1"]) == "4ba2587bb236045c2046dd7ea1e49812"
    assert set_hexdigest([b"\x00", b"b", b"a"]) == "81c2429ed08477536ed735303f251980"
    assert zset_hexdigest([b"n", b"-inf", b"m", b"1.50"]) == "d7e471d836dad79261e5bf3f6fbe8adb"
    lst = OrderedDigest("list")
    lst.add_elements([b"x"])
    lst.add_elements([b"", b"yz"])
    assert lst.hexdigest() == list_hexdigest([b"x", b"", b"yz"]) == "879b77dc2c82057a840dea90c952887e"
