"""Snapshot one side of a Redis-protocol pair into Parquet plus snapshot.json.

SCAN walks each database; every page of keys is read by :class:`KeyReader`; rows are flushed to
Parquet every ``PARQUET_ROWS_PER_GROUP`` rows, so memory stays bounded whatever the keyspace size.
SCAN may return a key twice; the snapshot keeps both rows (remembering every key would cost memory
proportional to the keyspace) and the Spark diff keeps the later read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis

from audit import defaults
from audit.errors import SnapshotError
from audit.ratelimit import RateLimiter
from audit.sources.redis.client import client_list_text, info_text
from audit.sources.redis.info import parse_info
from audit.sources.redis.keys import ERROR, OK, UNSTABLE, VANISHED, KeyReader, KeyState
from audit.sources.redis.resp import RespPipe

SNAPSHOT_SCHEMA = pa.schema(
    [
        ("db", pa.int32()),
        ("key", pa.binary()),
        ("type", pa.string()),
        ("ttl_ms", pa.int64()),  # PTTL at read time; null = no expiry
        ("expire_at_ms", pa.int64()),  # read_at_ms + ttl_ms: comparable across sides despite read skew
        ("length", pa.int64()),  # STRLEN / HLEN / LLEN / SCARD / ZCARD / XLEN
        ("digest", pa.string()),  # encoding-independent value digest (digest.py)
        ("status", pa.string()),  # ok | unstable | error  (vanished keys are counted, not written)
        ("error", pa.string()),
        ("read_at_ms", pa.int64()),
    ]
)
KEYS_FILE = "keys.parquet"
META_FILE = "snapshot.json"


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    qps: int = defaults.QPS
    scan_count: int = defaults.SCAN_COUNT
    page: int = defaults.BIG_KEY_ELEMENTS
    window_bytes: int = defaults.STRING_WINDOW_BYTES
    rows_per_group: int = defaults.PARQUET_ROWS_PER_GROUP


@dataclass
class SnapshotStats:
    keys_scanned: int = 0
    keys_ok: int = 0
    keys_unstable: int = 0
    keys_vanished: int = 0
    keys_error: int = 0
    commands: int = 0
    errors_sample: list[str] = field(default_factory=list)
    per_db: dict[int, int] = field(default_factory=dict)

    def add(self, db: int, states: list[KeyState]) -> None:
        self.keys_scanned += len(states)
        self.per_db[db] = self.per_db.get(db, 0) + len(states)
        for s in states:
            if s.status == OK:
                self.keys_ok += 1
            elif s.status == UNSTABLE:
                self.keys_unstable += 1
            elif s.status == VANISHED:
                self.keys_vanished += 1
            else:
                self.keys_error += 1
                if len(self.errors_sample) < 10:
                    self.errors_sample.append(f"db{db} {s.key[:64]!r}: {s.error}")


class _ParquetSink:
    def __init__(self, path: Path, rows_per_group: int) -> None:
        self._writer = pq.ParquetWriter(path, SNAPSHOT_SCHEMA, compression="zstd")
        self._rows: list[tuple[int, KeyState]] = []
        self._limit = rows_per_group

    def write(self, db: int, states: list[KeyState]) -> None:
        self._rows.extend((db, s) for s in states if s.status != VANISHED)
        if len(self._rows) >= self._limit:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        rows = self._rows
        dbs, states = zip(*rows, strict=True)
        cols: dict[str, Any] = {
            "db": dbs,
            **dict(zip(SNAPSHOT_SCHEMA.names[1:], zip(*states, strict=True), strict=True)),
        }
        self._writer.write_table(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA))
        self._rows = []

    def close(self) -> None:
        self.flush()
        self._writer.close()


def capture_state(client: redis.Redis, with_clients: bool) -> dict[str, Any]:
    """INFO replication/keyspace/server (raw and parsed) and CLIENT LIST, with the time they were read."""
    state: dict[str, Any] = {"at_ms": int(time.time() * 1000)}
    for section in ("server", "replication", "keyspace"):
        raw = info_text(client, section)
        state[f"info_{section}"] = parse_info(raw)
        state[f"info_{section}_raw"] = raw.decode("utf-8", "replace")
    if with_clients:
        raw_clients = client_list_text(client)
        state["client_list_raw"] = raw_clients.decode("utf-8", "replace") if raw_clients is not None else None
    return state


def snapshot_side(
    client: redis.Redis,
    *,
    side: str,
    endpoint: str,
    dbs: list[int],
    out_dir: Path,
    options: SnapshotOptions,
    on_keys: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Write `out_dir/keys.parquet` and `out_dir/snapshot.json`; return the snapshot.json content."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    start_state = capture_state(client, with_clients=True)
    limiter = RateLimiter(options.qps)
    stats = SnapshotStats()
    try:
        pipe = RespPipe(client, limiter)
    except (redis.RedisError, OSError) as e:
        raise SnapshotError(f"{side} {endpoint}: cannot open a pipeline connection: {e}", where=endpoint) from None
    sink = _ParquetSink(out_dir / KEYS_FILE, options.rows_per_group)
    reader = KeyReader(pipe, options.page, options.window_bytes)
    try:
        for db in dbs:
            _scan_db(pipe, reader, db, options, sink, stats, on_keys)
    except (OSError, ConnectionError, redis.RedisError) as e:
        raise SnapshotError(f"{side} {endpoint}: snapshot interrupted: {e}", where=endpoint) from None
    finally:
        sink.close()
        stats.commands = pipe.commands_sent
        pipe.close()
    end_state = capture_state(client, with_clients=True)
    meta = {
        "side": side,
        "endpoint": endpoint,
        "dbs": dbs,
        "started_at_ms": int(started * 1000),
        "ended_at_ms": int(time.time() * 1000),
        "duration_s": round(time.time() - started, 3),
        "rate_limit_qps": options.qps,
        "rate_limit_wait_s": round(limiter.waited_s, 3),
        "stats": asdict(stats),
        "start": start_state,
        "end": end_state,
    }
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


def _scan_db(
    pipe: RespPipe,
    reader: KeyReader,
    db: int,
    options: SnapshotOptions,
    sink: _ParquetSink,
    stats: SnapshotStats,
    on_keys: Callable[[int], None] | None,
) -> None:
    reply = pipe.execute([(b"SELECT", b"%d" % db)])[0]
    if isinstance(reply, Exception):
        raise SnapshotError(f"SELECT {db} failed: {reply}")
    cursor = b"0"
    count = b"%d" % options.scan_count
    while True:
        reply = pipe.execute([(b"SCAN", cursor, b"COUNT", count)])[0]
        if isinstance(reply, Exception):
            raise SnapshotError(f"SCAN in db {db} failed: {reply}")
        cursor, keys = reply
        if keys:
            states = reader.read(keys)
            stats.add(db, states)
            sink.write(db, states)
            if on_keys is not None:
                on_keys(len(keys))
        if cursor == b"0":
            return


__all__ = ["ERROR", "KEYS_FILE", "META_FILE", "SNAPSHOT_SCHEMA", "SnapshotOptions", "capture_state", "snapshot_side"]
