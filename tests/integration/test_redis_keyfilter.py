"""Key filters match exactly what Redis's own KEYS and SCAN MATCH match (a real server decides)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.keyfilter import KeyFilter

pytestmark = pytest.mark.integration

KEYS = [
    b"",
    b"a",
    b"b",
    b"ab",
    b"abc",
    b"a*c",
    b"ac",
    b"x",
    b"]",
    b"-",
    b"[",
    b"^",
    b"\\",
    b"*",
    b"?",
    b"a\\",
    b"b]",
    b"]a",
    b"xay",
    b"x\\y",
    b"x]y",
    b"x-y",
    b"user:1",
    b"user:1:2",
    b"user:",
    b"cart:9",
    b"tmp:user:1",
    b"\xff\x00",
    b"\x00",
    b"\n",
    b"hello",
    b"hallo",
    b"h\xc3\xa9llo",
]

TRICKY = [
    "*",
    "**",
    "",
    "?",
    "??",
    "a*",
    "*a",
    "a?c",
    "a\\*c",
    "[abc]*",
    "[^abc]*",
    "[a-c]",
    "[c-a]",
    "[a-]",
    "[-a]",
    "[]a]",
    "[]",
    "[^]",
    "[",
    "[abc",
    "[^",
    "\\",
    "a\\",
    "\\*",
    "[\\]]*",
    "[\\-]",
    "x[a-\\]y",
    "x[\\]-a]y",
    "h[^e]llo",
    "h?llo",
    "h??llo",
    "*\\[*",
    "user:*",
    "*:*:*",
    "*:*",
    "[\\",
    "[a\\",
    "\xff",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    s = RedisServer(free_port(), Path(tmp_path_factory.mktemp("keyfilter"))).start()
    c = s.client()
    c.mset({k: b"v" for k in KEYS})
    yield c
    s.stop()


def _redis_keys(c: redis.Redis, pattern: bytes) -> set[bytes]:
    return set(c.keys(pattern))


def _scan_match(c: redis.Redis, pattern: bytes) -> set[bytes]:
    return set(c.scan_iter(match=pattern, count=1000))


def _ours(include: list[str], exclude: list[str] | None = None) -> set[bytes]:
    f = KeyFilter(tuple(include), tuple(exclude or ()))
    return set(f.keep(KEYS))


@pytest.mark.parametrize("pattern", TRICKY)
def test_tricky_patterns_match_what_keys_and_scan_match_match(server: redis.Redis, pattern: str) -> None:
    p = pattern.encode()
    assert _ours([pattern]) == _redis_keys(server, p) == _scan_match(server, p)


def test_random_patterns_agree_with_keys(server: redis.Redis) -> None:
    rng = random.Random(11)
    alphabet = "ab*?[]^-\\x:"
    for _ in range(1500):
        pattern = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
        assert _ours([pattern]) == _redis_keys(server, pattern.encode()), pattern


def test_include_and_exclude_combine_and_count(server: redis.Redis) -> None:
    f = KeyFilter(("user:*", "cart:*"), ("*:2",))
    kept = f.keep(KEYS)
    assert set(kept) == (_redis_keys(server, b"user:*") | _redis_keys(server, b"cart:*")) - _redis_keys(server, b"*:2")
    assert set(kept) == {b"user:1", b"user:", b"cart:9"}
    assert f.filtered_out == len(KEYS) - 3
    assert f.scan_match() is None  # two includes: SCAN cannot apply them server-side
    one = KeyFilter(("user:*",), ("*:2",))
    assert one.scan_match() == b"user:*"
    # SCAN MATCH on the include, then the exclude in the reader, gives the same keys as the filter alone
    assert set(one.keep(_scan_match(server, b"user:*"))) == set(KeyFilter(("user:*",), ("*:2",)).keep(KEYS))
