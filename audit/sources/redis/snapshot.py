"""Snapshot one side of a Redis-protocol pair into Parquet plus snapshot.json.

SCAN walks each database; every page of keys is read by :class:`KeyReader` in two requests (TYPE+PTTL,
then the values). Three batches are in flight on one connection at any time: the request sent for
batch n asks for the next SCAN page, the TYPE/PTTL of the page before and the values of the one before
that, and the client digests the previous replies while the server works on it. Rows are flushed to
Parquet every ``rows_per_group`` rows, so memory stays bounded whatever the keyspace size. SCAN may
return a key twice; the snapshot keeps both rows (remembering every key would cost memory proportional
to the keyspace) and the Spark diff keeps the later read.

How hard the server is read is :class:`audit.pacing.Pacer`'s decision (a keys/s cap, a target time per
batch, back-off on the server's latency or load); see that module for the knobs.
:func:`audit.sources.redis.sides.snapshot_sides` snapshots several sides at once, one process each.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import redis

from audit import defaults
from audit.errors import SnapshotError
from audit.pacing import Pacer, PaceSettings, keys_per_s_from_qps, qps_warning
from audit.sources.redis.client import client_list_text, info_text
from audit.sources.redis.info import parse_info
from audit.sources.redis.keys import ERROR, OK, UNSTABLE, VANISHED, BatchPlan, KeyReader, Rows, head_request
from audit.sources.redis.resp import RespPipe, bulk, command_prefix

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
_DICTIONARY_COLUMNS = ["type", "status", "error"]  # the others are near-unique: a dictionary only costs


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """How one side is read. `qps` is the deprecated command cap (qps / 4 keys/s); see audit.pacing."""

    qps: int | None = None
    scan_count: int = defaults.SCAN_COUNT
    page: int = defaults.BIG_KEY_ELEMENTS
    window_bytes: int = defaults.STRING_WINDOW_BYTES
    rows_per_group: int = defaults.PARQUET_ROWS_PER_GROUP
    max_keys_per_s: float | None = None
    batch_time_s: float = 0.05
    max_latency_ms: float | None = 10.0
    max_other_ops_per_s: float | None = None
    sample_every_s: float = 1.0
    match: bytes | None = None
    """SCAN MATCH pattern: the server skips keys that do not match (one include glob of a key filter)."""
    key_filter: Callable[[list[bytes]], list[bytes]] | None = None
    """Keeps the keys to read of each SCAN page (a pair's `keys:` filter); the others are not read."""

    def pace_settings(self) -> PaceSettings:
        cap = self.max_keys_per_s
        if cap is None and self.qps is not None:
            warnings.warn(qps_warning(self.qps), DeprecationWarning, stacklevel=2)
            cap = keys_per_s_from_qps(self.qps)
        return PaceSettings(
            max_keys_per_s=cap,
            batch_time_s=self.batch_time_s,
            max_batch_keys=self.scan_count,
            min_batch_keys=min(10, self.scan_count),
            max_latency_ms=self.max_latency_ms,
            max_other_ops_per_s=self.max_other_ops_per_s,
            sample_every_s=self.sample_every_s,
        )


@dataclass
class SnapshotStats:
    keys_scanned: int = 0
    keys_ok: int = 0
    keys_unstable: int = 0
    keys_vanished: int = 0
    keys_error: int = 0
    keys_filtered_out: int = 0
    """Keys SCAN returned that the key filter dropped (with MATCH, the server drops more: see
    :func:`filtered_by_match`)."""
    commands: int = 0
    server_wait_s: float = 0.0
    errors_sample: list[str] = field(default_factory=list)
    per_db: dict[int, int] = field(default_factory=dict)

    def add(self, db: int, rows: Rows) -> None:
        n = len(rows) + rows.vanished
        self.keys_scanned += n
        self.per_db[db] = self.per_db.get(db, 0) + n
        self.keys_vanished += rows.vanished
        ok = rows.status.count(OK)
        self.keys_ok += ok
        if ok == len(rows):
            return
        self.keys_unstable += rows.status.count(UNSTABLE)
        for k, status, err in zip(rows.key, rows.status, rows.error, strict=True):
            if status == ERROR:
                self.keys_error += 1
                if len(self.errors_sample) < 10:
                    self.errors_sample.append(f"db{db} {k[:64]!r}: {err}")


class _ParquetSink:
    """Row groups of `rows_per_group` rows, built column by column (no object per row)."""

    def __init__(self, path: Path, rows_per_group: int) -> None:
        self._writer = pq.ParquetWriter(
            path, SNAPSHOT_SCHEMA, compression="zstd", compression_level=1, use_dictionary=_DICTIONARY_COLUMNS
        )
        self._batches: list[pa.RecordBatch] = []
        self._rows = 0
        self._limit = rows_per_group

    def write(self, db: int, rows: Rows) -> None:
        n = len(rows)
        if not n:
            return
        cols = [
            pa.repeat(pa.scalar(db, pa.int32()), n),
            _binary(rows.key),
            pa.array(rows.type, pa.string()),
            pa.array(rows.ttl_ms, pa.int64()),
            pa.array(rows.expire_at_ms, pa.int64()),
            pa.array(rows.length, pa.int64()),
            pa.array(rows.digest, pa.string()),
            pa.array(rows.status, pa.string()),
            pa.array(rows.error, pa.string()),
            pa.array(rows.read_at_ms, pa.int64()),
        ]
        self._batches.append(pa.RecordBatch.from_arrays(cols, schema=SNAPSHOT_SCHEMA))
        self._rows += n
        if self._rows >= self._limit:
            self.flush()

    def flush(self) -> None:
        if self._batches:
            self._writer.write_table(pa.Table.from_batches(self._batches).combine_chunks())
            self._batches, self._rows = [], 0

    def close(self) -> None:
        self.flush()
        self._writer.close()


def _binary(values: list[bytes]) -> pa.Array:
    """A binary array from one join of the values (pa.array(values, pa.binary()) costs ~1 us per value)."""
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:], dtype=np.int32)
    data = b"".join(values)
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


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
    pacer = Pacer(options.pace_settings())
    stats = SnapshotStats()
    try:
        pipe = RespPipe(client)
    except (redis.RedisError, OSError) as e:
        raise SnapshotError(f"{side} {endpoint}: cannot open a pipeline connection: {e}", where=endpoint) from None
    sink = _ParquetSink(out_dir / KEYS_FILE, options.rows_per_group)
    reader = KeyReader(pipe, options.page, options.window_bytes)
    sampler = _Sampler(client, pipe, stats)
    try:
        for db in dbs:
            _Scan(pipe, reader, db, pacer, sampler, sink, stats, on_keys, options).run()
    except (OSError, ConnectionError, redis.RedisError) as e:
        raise SnapshotError(f"{side} {endpoint}: snapshot interrupted: {e}", where=endpoint) from None
    finally:
        sink.close()
        stats.commands = pipe.commands_sent
        stats.server_wait_s = round(pipe.wait_s, 3)
        pipe.close()
    end_state = capture_state(client, with_clients=True)
    duration = time.time() - started
    meta = {
        "side": side,
        "endpoint": endpoint,
        "dbs": dbs,
        "started_at_ms": int(started * 1000),
        "ended_at_ms": int(time.time() * 1000),
        "duration_s": round(duration, 3),
        "rate_limit_qps": options.qps,
        "rate_limit_wait_s": round(pacer.waited_s, 3),
        "pacing": pacer.report(),
        "stats": asdict(stats),
        "key_filter": _filter_meta(options, stats, start_state, dbs),
        "start": start_state,
        "end": end_state,
    }
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


def filtered_by_match(info_keyspace: dict[str, Any], dbs: list[int], per_db: dict[int, int]) -> int:
    """Keys SCAN MATCH left out, estimated as the server's key count (INFO keyspace at the start) minus
    the keys SCAN returned: keys written or expired during the scan make it approximate."""
    total = 0
    for db in dbs:
        listed = info_keyspace.get(f"db{db}")
        keys = listed.get("keys") if isinstance(listed, dict) else None
        if isinstance(keys, int) or (isinstance(keys, str) and keys.isdigit()):
            total += max(0, int(keys) - per_db.get(db, 0))
    return total


def _filter_meta(
    options: SnapshotOptions, stats: SnapshotStats, start: dict[str, Any], dbs: list[int]
) -> dict[str, Any] | None:
    """How many keys the key filter left out: by the reader (exact) and by SCAN MATCH (estimated)."""
    if options.match is None and options.key_filter is None:
        return None
    info = start.get("info_keyspace") or {}
    by_match = filtered_by_match(info, dbs, stats.per_db) if options.match is not None else 0
    by_reader = stats.keys_filtered_out
    if options.match is not None:  # per_db counts kept keys only; the reader's drops were scanned too
        by_match = max(0, by_match - by_reader)
    return {
        "match": options.match.decode("utf-8", "replace") if options.match is not None else None,
        "filtered_by_reader": by_reader,
        "filtered_by_match": by_match,
        "filtered_out": by_reader + by_match,
        "match_is_estimate": options.match is not None,
    }


class _Sampler:
    """The server's latency and load, read on the snapshot client's own connection (not the pipe)."""

    def __init__(self, client: redis.Redis, pipe: RespPipe, stats: SnapshotStats) -> None:
        self._client, self._pipe, self._stats = client, pipe, stats
        self._last = (time.monotonic(), 0, 0)  # time, commands sent, keys read

    def _ping_ms(self) -> float:
        """One O(1) round trip; DBSIZE rather than PING, which a read-only ACL user (+@read) may not run."""
        started = time.perf_counter()
        self._client.execute_command("DBSIZE")
        return (time.perf_counter() - started) * 1000

    def sample(self, pacer: Pacer) -> None:
        try:
            latency_ms = min(self._ping_ms() for _ in range(3))  # the least of 3: not this process' hiccups
            ops = parse_info(info_text(self._client, "stats")).get("instantaneous_ops_per_sec")
        except redis.RedisError:  # a server that refuses INFO stats still gets the latency bound
            latency_ms, ops = None, None
        now, cmds, keys = time.monotonic(), self._pipe.commands_sent, self._stats.keys_scanned
        t0, c0, k0 = self._last
        dt = max(now - t0, 1e-6)
        self._last = (now, cmds, keys)
        pacer.observe(
            latency_ms=latency_ms,
            server_ops_per_s=float(ops) if ops is not None else None,
            own_ops_per_s=(cmds - c0) / dt,
            own_keys_per_s=(keys - k0) / dt,
        )


class _Scan:
    """One database, with three batches in flight (see the module docstring)."""

    def __init__(
        self,
        pipe: RespPipe,
        reader: KeyReader,
        db: int,
        pacer: Pacer,
        sampler: _Sampler,
        sink: _ParquetSink,
        stats: SnapshotStats,
        on_keys: Callable[[int], None] | None,
        options: SnapshotOptions,
    ) -> None:
        self.pipe, self.reader, self.db, self.pacer, self.sampler = pipe, reader, db, pacer, sampler
        self.sink, self.stats, self.on_keys = sink, stats, on_keys
        match = options.match
        self._scan_prefix = command_prefix(b"SCAN", 4 if match is None else 6)
        self._match = b"" if match is None else bulk(b"MATCH") + bulk(match)
        self._keep = options.key_filter
        self._head_wait = 0.0

    def _scan_cmd(self, cursor: bytes) -> bytes:
        count = bulk(b"COUNT") + bulk(b"%d" % self.pacer.batch_keys)
        return self._scan_prefix + bulk(cursor) + self._match + count

    def run(self) -> None:
        pipe, reader, pacer = self.pipe, self.reader, self.pacer
        reply = pipe.call((b"SELECT", b"%d" % self.db))
        if isinstance(reply, Exception):
            raise SnapshotError(f"SELECT {self.db} failed: {reply}")
        scan_t: int | None = pipe.send_packed(self._scan_cmd(b"0"), 1)
        heads: tuple[list[bytes], list[bytes], int, float] | None = None  # keys, bulks, ticket, sent at
        values: tuple[BatchPlan, int, float] | None = None  # plan, ticket, sent at
        while scan_t is not None or heads is not None or values is not None:
            cursor, keys = self._scan_reply(pipe.recv(scan_t)[0]) if scan_t is not None else (b"0", [])
            plan = None
            if heads is not None:
                h_keys, h_bulks, h_ticket, h_sent = heads
                waited = pipe.wait_s
                head = pipe.recv(h_ticket)
                self._head_wait = pipe.wait_s - waited
                plan = reader.plan(h_keys, h_bulks, head, int((h_sent + time.time()) * 500))  # midpoint, ms
            more = scan_t is not None and cursor != b"0"
            if keys:
                pacer.before_batch(len(keys))
            bulks = [bulk(k) for k in keys]
            sent = time.time()
            scan_next, head_t, value_t = pipe.send_parts(
                [
                    (self._scan_cmd(cursor) if more else b"", 1 if more else 0),
                    (head_request(bulks), 2 * len(keys)),
                    (plan.payload if plan is not None else b"", plan.n_replies if plan is not None else 0),
                ]
            )
            self._finish(values)  # the server works on what was just sent meanwhile
            scan_t = scan_next if more else None
            heads = (keys, bulks, head_t, sent) if keys else None
            values = (plan, value_t, sent) if plan is not None else None
            if pacer.sample_due():
                self.sampler.sample(pacer)

    def _finish(self, values: tuple[BatchPlan, int, float] | None) -> None:
        if values is None:
            return
        plan, ticket, _sent = values
        waited = self.pipe.wait_s
        replies = self.pipe.recv(ticket)
        server_s = self.pipe.wait_s - waited + self._head_wait
        rows = self.reader.finish(plan, replies, self.pipe.call)
        self.stats.add(self.db, rows)
        self.sink.write(self.db, rows)
        self.pacer.after_batch(len(plan.keys), server_s)
        if self.on_keys is not None:
            self.on_keys(len(plan.keys))

    def _scan_reply(self, reply: Any) -> tuple[bytes, list[bytes]]:
        if isinstance(reply, Exception):
            raise SnapshotError(f"SCAN in db {self.db} failed: {reply}")
        cursor, keys = reply
        if self._keep is not None and keys:
            kept = self._keep(keys)
            self.stats.keys_filtered_out += len(keys) - len(kept)
            return cursor, kept
        return cursor, keys


__all__ = [
    "ERROR",
    "KEYS_FILE",
    "META_FILE",
    "SNAPSHOT_SCHEMA",
    "VANISHED",
    "SnapshotOptions",
    "capture_state",
    "snapshot_side",
]
