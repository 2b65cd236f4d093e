"""What a keyspace snapshot held, for a verification certificate: an order-independent content digest.

Content digest (:data:`DIGEST_ALGORITHM`): for every readable key of a snapshot, XXH3-128 of
`db (int32 LE) | key length (uint32 LE) | key | type | 0x00 | value digest | has-expiry byte`; the
digest is the sum of these modulo 2^128, so the order of SCAN does not matter and equal multisets give
equal digests. A key SCAN returned twice counts once (its later read, as the diff does). Expiry times
are compared by the diff with a tolerance (read skew) and are not part of the digest; whether a key
expires is.

The digest covers what the pair's compare mode compares (:data:`DIGEST_COVERS`): in `length` the value
digest is replaced by the element count, in `keys` type, value and expiry are left out. A verification
in `keys` mode of values that differ must not fail on a digest of the values it was told to ignore.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.diff.compare_modes import check_mode
from audit.kernel.state import PairState
from audit.sources.redis.snapshot import KEYS_FILE, META_FILE

DIGEST_ALGORITHM = "xxh3_128-sum"
DIGEST_COVERS = {
    "full": "db, key, type, value digest, whether it expires",
    "length": "db, key, type, element count, whether it expires",
    "keys": "db, key",
}
"""What each compare mode's content digest is of (the certificate's `content.compared`)."""
_MASK = (1 << 128) - 1
_ROW_HEAD = struct.Struct("<iI")  # db, key length


@dataclass
class SideDigest:
    """What one side's snapshot held: readable keys per db, unreadable ones, and the content digest."""

    digest: str | None = None
    compare: str = "full"
    keys: int = 0
    keys_per_db: dict[str, int] = field(default_factory=dict)
    keys_unreadable: int = 0
    scan_duplicates: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "algorithm": DIGEST_ALGORITHM,
            "digest": self.digest,
            "compared": DIGEST_COVERS[self.compare],
            "keys": self.keys,
            "keys_per_db": self.keys_per_db,
            "keys_unreadable": self.keys_unreadable,
            "scan_duplicates": self.scan_duplicates,
        }


def _row_hash(db: int, key: bytes, type_: str | None, digest: str | None, expires: bool) -> int:
    import xxhash

    data = b"".join(
        (
            _ROW_HEAD.pack(db, len(key)),
            key,
            (type_ or "").encode(),
            b"\0",
            (digest or "").encode(),
            b"\1" if expires else b"\0",
        )
    )
    return int(xxhash.xxh3_128_intdigest(data))


_COLUMNS = ["db", "key", "type", "digest", "expire_at_ms", "status", "read_at_ms", "length"]


def _compared(
    compare: str, type_: str | None, digest: str | None, expires: bool, length: int | None
) -> tuple[str | None, str | None, bool]:
    """(type, value digest, expires) as the compare mode sees them: the value's digest replaced by its
    element count (`length`), or nothing but the key (`keys`)."""
    if compare == "keys":
        return None, None, False
    if compare == "length":
        return type_, f"length:{length}", expires
    return type_, digest, expires


def snapshot_digest(path: Path, dedupe: bool = True, batch_size: int = 50_000, compare: str = "full") -> SideDigest:
    """The content digest of a keyspace snapshot (`keys.parquet`), streamed batch by batch, of what the
    compare mode compares (:data:`DIGEST_COVERS`).

    With `dedupe` (needed when SCAN returned some key twice) one 8-byte key hash, one read time and
    the 16-byte row hash are kept per row until the end, instead of only running sums.
    """
    import numpy as np
    import pyarrow.dataset as ds
    import xxhash

    result = SideDigest(compare=check_mode(compare))
    total = 0
    kept: list[tuple[Any, ...]] = []
    for batch in ds.dataset(path, format="parquet").to_batches(columns=_COLUMNS, batch_size=batch_size):
        cols = [batch.column(c).to_pylist() for c in _COLUMNS]
        hashes, key_ids, read_at, ok, db_of = [], [], [], [], []
        for db, key, type_, digest, expire_at, status, at, length in zip(*cols, strict=True):
            good = status == "ok"
            hashes.append(
                _row_hash(db, key, *_compared(compare, type_, digest, expire_at is not None, length)) if good else 0
            )
            if dedupe:
                key_ids.append(xxhash.xxh3_64_intdigest(_ROW_HEAD.pack(db, len(key)) + key))
                read_at.append(at or 0)
                ok.append(good)
                db_of.append(db)
            elif good:
                total = (total + hashes[-1]) & _MASK
                result.keys += 1
                result.keys_per_db[str(db)] = result.keys_per_db.get(str(db), 0) + 1
            else:
                result.keys_unreadable += 1
        if dedupe:
            kept.append(
                (
                    np.array(key_ids, np.uint64),
                    np.array(read_at, np.int64),
                    np.array([h >> 64 for h in hashes], np.uint64),
                    np.array([h & ((1 << 64) - 1) for h in hashes], np.uint64),
                    np.array(ok, bool),
                    np.array(db_of, np.int64),
                )
            )
    if dedupe and kept:
        key_id, at, hi, lo, good, dbs = (np.concatenate(parts) for parts in zip(*kept, strict=True))
        order = np.lexsort((at, key_id))  # by key, then read time: the last row of each key is its later read
        last = np.ones(len(order), bool)
        last[:-1] = key_id[order][1:] != key_id[order][:-1]
        chosen = order[last]
        result.scan_duplicates = int(len(order) - len(chosen))
        ok_rows = chosen[good[chosen]]
        result.keys = len(ok_rows)
        result.keys_unreadable = int(len(chosen) - len(ok_rows))
        total = ((sum(int(v) for v in hi[ok_rows]) << 64) + sum(int(v) for v in lo[ok_rows])) & _MASK
        for db, n in zip(*np.unique(dbs[ok_rows], return_counts=True), strict=True):
            result.keys_per_db[str(int(db))] = int(n)
    result.digest = f"{total:032x}"
    return result


def side_certificate(snap_dir: Path, state: PairState, side: str, compare: str = "full") -> dict[str, Any]:
    """What the certificate states about one side of a keyspace pair: the server as its INFO showed it
    when the snapshot began, the keys it reported, and the content digest of the snapshot (of what the
    pair's compare mode compares)."""
    meta = json.loads((snap_dir / META_FILE).read_text()) if (snap_dir / META_FILE).is_file() else {}
    info_server = (meta.get("start") or {}).get("info_server") or {}
    info_keyspace = (meta.get("start") or {}).get("info_keyspace") or {}
    out: dict[str, Any] = {
        "server_run_id": info_server.get("run_id"),
        "keys_reported_by_server": {
            db: int(v["keys"])
            for db, v in sorted(info_keyspace.items())
            if isinstance(v, dict) and str(v.get("keys", "")).isdigit()
        },
        "snapshot_started_at_ms": meta.get("started_at_ms"),
        "snapshot_ended_at_ms": meta.get("ended_at_ms"),
    }
    version = info_server.get("pika_version") or info_server.get("redis_version")
    if version and not (state.servers.get(side) or {}).get("version"):
        out["version"] = version
    keys_file = snap_dir / KEYS_FILE
    duplicates = state.metrics.get(f"{side}_scan_duplicates")
    out["content"] = (
        snapshot_digest(keys_file, dedupe=duplicates is None or int(duplicates) > 0, compare=compare).as_dict()
        if keys_file.exists()
        else None
    )
    return out
