"""The snapshot client's per-key work, part by part, on replies built in memory (no server).

    .venv/bin/python bench/digest_bench.py [--repeat 5]

The snapshot's client spends 6.5-9.5 us of CPU per key of the end-to-end mix (docs/performance.md).
This bench times its parts on the same shapes: planning a batch from TYPE/PTTL replies, packing the
TYPE/PTTL request, a string's digest, and the unordered digest of hashes and sets of 5, 20 and 50
elements (the mix's collections hold 5-50). Baseline, same run: one xxh3-128 over the collection's
bytes joined (the least any digest of those bytes costs). Alternative, same run: a digest that sorts the
elements and hashes them once, length-prefixed, instead of hashing each and adding (what a one-page
collection could use). Each figure is the best of --repeat runs. Prints peak RSS.
"""

from __future__ import annotations

import argparse
import itertools
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import xxhash
from datasets import peak_rss_mb

from audit.defaults import BIG_KEY_ELEMENTS, STRING_WINDOW_BYTES
from audit.sources.redis.digest import digest_strings, hash_hexdigest, set_hexdigest
from audit.sources.redis.keys import BatchPlan, head_request, value_commands
from audit.sources.redis.resp import bulk

_LEN = struct.Struct("<I")
_h128_hex = xxhash.xxh3_128_hexdigest


def sorted_digest(tag: bytes, elements: list[bytes]) -> str:
    """The alternative: elements sorted, each behind its u32 length, hashed once."""
    parts: list[bytes] = [b""] * (2 * len(elements))
    parts[0::2] = list(map(_LEN.pack, map(len, elements)))
    parts[1::2] = elements
    return str(_h128_hex(tag + b"".join(parts)))


def sorted_hash(flat: list[bytes]) -> str:
    pairs = sorted(zip(flat[0::2], flat[1::2], strict=True))
    return sorted_digest(b"hash", list(itertools.chain.from_iterable(pairs)))


def sorted_set(members: list[bytes]) -> str:
    return sorted_digest(b"set", sorted(members))


def best_us(work: Callable[[], Any], calls: int, per: int, repeat: int) -> float:
    """Microseconds per item (`per` items a call), the best of `repeat` runs of `calls` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            work()
        best = min(best, time.perf_counter() - t0)
    return best / calls / per * 1e6


def batch_parts(rng: random.Random, repeat: int) -> list[tuple[str, float]]:
    keys = [b"bench:key:%d" % i for i in range(1000)]
    bulks = [bulk(k) for k in keys]
    head: list[Any] = []
    for _ in keys:
        t = b"string" if rng.random() < 0.7 else rng.choice([b"hash", b"list", b"set", b"zset"])
        head += [t, -1 if rng.random() < 0.8 else 86_400_000]
    suffixes = value_commands(BIG_KEY_ELEMENTS, STRING_WINDOW_BYTES)
    values = [rng.randbytes(rng.randint(16, 200)) for _ in range(1000)]
    return [
        ("pack TYPE/PTTL request (per key)", best_us(lambda: head_request([bulk(k) for k in keys]), 200, 1000, repeat)),
        (
            "plan a batch from TYPE/PTTL (per key)",
            best_us(lambda: BatchPlan(keys, bulks, head, 0, suffixes), 200, 1000, repeat),
        ),
        ("string digest, 16-200 bytes (per key)", best_us(lambda: digest_strings(values), 200, 1000, repeat)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(7)
    print(f"{'part':48} {'us':>8}")
    for name, us in batch_parts(rng, args.repeat):
        print(f"{name:48} {us:8.2f}")
    print()
    head = ("collection", "baseline: one hash", "product: hash each, add", "sorted, one hash", "product/baseline")
    print(f"{head[0]:14} {head[1]:>19} {head[2]:>24} {head[3]:>17} {head[4]:>17}")
    for n in (5, 20, 50):
        flat: list[bytes] = []
        for i in range(n):
            flat += [b"field:%d" % i, rng.randbytes(rng.randint(10, 60))]
        members = flat[1::2]
        for label, product, alternative, data in (
            (f"hash of {n}", hash_hexdigest, sorted_hash, flat),
            (f"set of {n}", set_hexdigest, sorted_set, members),
        ):
            base = best_us(lambda d=data: _h128_hex(b"".join(d)), 5000, 1, args.repeat)
            mine = best_us(lambda d=data, f=product: f(d), 5000, 1, args.repeat)
            alt = best_us(lambda d=data, f=alternative: f(d), 5000, 1, args.repeat)
            print(f"{label:14} {base:17.2f}us {mine:22.2f}us {alt:15.2f}us {mine / base:16.1f}x")
    print(f"\npeak RSS of this process {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
