"""How many keys a snapshot's key filter left out (a pair's `keys:`), for the side's snapshot.json.

The reader's own filter (:attr:`audit.sources.redis.snapshot.SnapshotOptions.key_filter`, applied to each
SCAN page) counts exactly what it drops. With `SCAN MATCH` the server drops keys before they are
returned, so their number is estimated as the server's key count at the start (INFO keyspace) minus the
keys SCAN returned: keys written or expired during the scan make it approximate, and it says so.
"""

from __future__ import annotations

from typing import Any


def filtered_by_match(info_keyspace: dict[str, Any], dbs: list[int], per_db: dict[int, int]) -> int:
    """Keys SCAN MATCH left out: per db, the server's key count minus the keys SCAN returned (at least 0)."""
    total = 0
    for db in dbs:
        listed = info_keyspace.get(f"db{db}")
        keys = listed.get("keys") if isinstance(listed, dict) else None
        if isinstance(keys, int) or (isinstance(keys, str) and keys.isdigit()):
            total += max(0, int(keys) - per_db.get(db, 0))
    return total


def filter_meta(
    match: bytes | None,
    filtering: bool,
    by_reader: int,
    info_keyspace: dict[str, Any],
    dbs: list[int],
    per_db: dict[int, int],
) -> dict[str, Any] | None:
    """snapshot.json's `key_filter`: what the reader dropped (exact) and what SCAN MATCH dropped
    (estimated); None when the snapshot had no filter. `per_db` counts the keys the reader kept."""
    if match is None and not filtering:
        return None
    by_match = max(0, filtered_by_match(info_keyspace, dbs, per_db) - by_reader) if match is not None else 0
    return {
        "match": match.decode("utf-8", "replace") if match is not None else None,
        "filtered_by_reader": by_reader,
        "filtered_by_match": by_match,
        "filtered_out": by_reader + by_match,
        "match_is_estimate": match is not None,
    }
