"""Snapshot one side of a Redis-protocol pair into Parquet plus snapshot.json.

SCAN walks each database; every page of keys is read by :class:`KeyReader` in two requests (TYPE+PTTL,
then the values). Three batches are in flight on one connection at any time: the request sent for
batch n asks for the next SCAN page, the TYPE/PTTL of the page before and the values of the one before
that, and the client digests the previous replies while the server works on it. Rows are flushed to
Parquet part files of ``rows_per_group`` rows, so memory stays bounded whatever the keyspace size, and
each part is a checkpoint an interrupted snapshot continues from (:class:`Checkpoint`). SCAN may
return a key twice; the snapshot keeps both rows (remembering every key would cost memory proportional
to the keyspace) and the Spark diff keeps the later read.

How hard the server is read is :class:`audit.pacing.Pacer`'s decision (a keys/s cap, a target time per
batch, back-off on the server's latency or load); see that module for the knobs.
:func:`audit.sources.redis.sides.snapshot_sides` snapshots several sides at once, one process each.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import redis

from audit import defaults
from audit.errors import ConfigError, SnapshotError
from audit.layout import write_text
from audit.pacing import Pacer, PaceSettings, keys_per_s_from_qps, qps_warning
from audit.sources.redis.checkpoint import Checkpoint, SnapshotStats, part_path, read_json_or_none
from audit.sources.redis.client import client_list_text, info_text
from audit.sources.redis.info import parse_info
from audit.sources.redis.keys import ERROR, VANISHED, BatchPlan, KeyReader, Rows, head_request
from audit.sources.redis.resp import RespPipe, bulk, command_prefix
from audit.sources.redis.scan_filter import filter_meta

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


NO_SUCH_DB = "the server has no such db"
"""How a SELECT the server refuses as out of range is reported (keyspace_check tells whose mistake it is)."""


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """How one side is read. `qps` is the deprecated command cap (qps / 4 keys/s); see audit.pacing."""

    qps: int | None = None
    scan_count: int = defaults.SCAN_COUNT
    page: int = defaults.BIG_KEY_ELEMENTS
    window_bytes: int = defaults.STRING_WINDOW_BYTES
    rows_per_group: int = defaults.PARQUET_ROWS_PER_GROUP
    checkpoint_every_s: float = 5.0
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


class _ParquetSink:
    """Part files of about `rows_per_group` rows each under `keys.parquet/`, built column by column (no
    object per row). A part is written whole (to a temporary name, then renamed), so whatever a crash
    leaves behind is readable, and each finished part is reported with the SCAN cursor that follows the
    last batch it holds: the checkpoint a resumed snapshot continues from."""

    def __init__(
        self,
        directory: Path,
        rows_per_group: int,
        next_part: int,
        on_part: Callable[[int, int, bytes], None],
        every_s: float = 5.0,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._dir = directory
        self._batches: list[pa.RecordBatch] = []
        self._rows = 0
        self._limit = rows_per_group
        self.parts = next_part
        self._on_part = on_part
        self._after: tuple[int, bytes] | None = None  # (db, cursor) after the last batch written
        self._every_s = every_s  # a slow (paced) snapshot still checkpoints this often
        self._flushed_at = time.monotonic()

    def write(self, db: int, rows: Rows, cursor_after: bytes) -> None:
        n = len(rows)
        self._after = (db, cursor_after)
        if n:
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
        if self._rows >= self._limit or (self._rows and time.monotonic() - self._flushed_at >= self._every_s):
            self.flush()

    def flush(self) -> None:
        self._flushed_at = time.monotonic()
        if self._batches:
            path = part_path(self._dir, self.parts)
            tmp = path.with_name(f".{path.name}.tmp")  # readers skip dot files: a crash leaves nothing half-read
            table = pa.Table.from_batches(self._batches).combine_chunks()
            pq.write_table(table, tmp, compression="zstd", compression_level=1, use_dictionary=_DICTIONARY_COLUMNS)
            tmp.replace(path)
            self.parts += 1
            self._batches, self._rows = [], 0
        if self._after is not None:
            self._on_part(self.parts, *self._after)

    def close(self) -> None:
        self.flush()


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
    """Write `out_dir/keys.parquet/` and `out_dir/snapshot.json`; return the snapshot.json content.

    A side that was interrupted (the server went away, the process was killed) and is snapshotted again
    into the same `out_dir` continues from its checkpoint: the parts already written are kept and SCAN
    resumes at the cursor after the last batch they hold. A side already complete is reused as it is.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = Checkpoint.load(out_dir, dbs, out_dir / KEYS_FILE)
    if checkpoint.complete:
        if (kept := read_json_or_none(out_dir / META_FILE)) is not None:
            return {**kept, "reused": True}
        # complete, but its snapshot.json (the server's state around the read) is lost: read it all again
        checkpoint = Checkpoint.start_over(dbs, out_dir / KEYS_FILE)
    started = time.time()
    start_state = capture_state(client, with_clients=True)
    pacer = Pacer(options.pace_settings())
    stats = checkpoint.stats()
    try:
        pipe = RespPipe(client)
    except (redis.RedisError, OSError) as e:
        raise SnapshotError(f"{side} {endpoint}: cannot open a pipeline connection: {e}", where=endpoint) from None
    sink = _ParquetSink(
        out_dir / KEYS_FILE,
        options.rows_per_group,
        checkpoint.parts,
        checkpoint.saver(out_dir, stats),
        options.checkpoint_every_s,
    )
    reader = KeyReader(pipe, options.page, options.window_bytes)
    sampler = _Sampler(client, pipe, stats)
    try:
        for db, cursor in checkpoint.remaining():
            _Scan(pipe, reader, db, pacer, sampler, sink, stats, on_keys, options).run(cursor)
        sink.close()
    except ConfigError as e:
        raise ConfigError(f"{side} {endpoint}: {e}") from None
    except SnapshotError as e:  # a command the server refused (SELECT, SCAN): named with the server
        raise SnapshotError(f"{side} {endpoint}: {e}", where=endpoint) from None
    except (OSError, ConnectionError, redis.RedisError) as e:
        raise SnapshotError(
            f"{side} {endpoint}: snapshot interrupted: {e}{_dropped_hint(e)} (what was read is kept: snapshotting "
            "this run again continues from there)",
            where=endpoint,
        ) from None
    finally:
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
        "resumed_from": checkpoint.resumed_from(),
        "rate_limit_qps": options.qps,
        "rate_limit_wait_s": round(pacer.waited_s, 3),
        "pacing": pacer.report(),
        "stats": asdict(stats),
        "key_filter": filter_meta(
            options.match,
            options.key_filter is not None,
            stats.keys_filtered_out,
            start_state.get("info_keyspace") or {},
            dbs,
            stats.per_db,
        ),
        "start": start_state,
        "end": end_state,
    }
    write_text(out_dir / META_FILE, json.dumps(meta, indent=1, sort_keys=True))  # whole or not at all
    Checkpoint.mark_complete(out_dir, dbs, sink.parts, stats)
    return meta


def _dropped_hint(error: BaseException) -> str:
    """Why a server that is up drops the auditor mid-read: "Connection reset by peer" alone sent operators
    looking at the network, while the usual cause is the server's own limit on a client's pending replies."""
    if not isinstance(error, (ConnectionResetError, BrokenPipeError)) and "closed the connection" not in str(error):
        return ""
    return (
        "; if the server stayed up it dropped the auditor: a `client-output-buffer-limit normal` smaller than"
        " the replies of the batches in flight (lower `scan_count` and `big_key_elements`), `maxmemory-clients`,"
        " or CLIENT KILL; its log says which"
    )


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
        # apart: a user refused INFO (NOPERM) still gets the latency bound; a lost server is the pipe's to report
        latency_ms: float | None = None
        ops = None
        with contextlib.suppress(redis.RedisError):
            latency_ms = self._ping_ms()  # one round trip: the stall the batch in flight causes
        with contextlib.suppress(redis.RedisError):
            ops = parse_info(info_text(self._client, "stats")).get("instantaneous_ops_per_sec")
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

    def run(self, start: bytes = b"0") -> None:
        """Scan the db from cursor `start` (b"0": from the beginning)."""
        pipe, reader, pacer = self.pipe, self.reader, self.pacer
        reply = pipe.call((b"SELECT", b"%d" % self.db))
        if isinstance(reply, Exception):
            if "out of range" in str(reply) or "invalid DB index" in str(reply):  # Redis's words, Pika's
                raise ConfigError(f"dbs: db {self.db}: {NO_SUCH_DB} ({reply})")
            raise SnapshotError(f"SELECT {self.db} failed: {reply}")
        scan_t: int | None = pipe.send_packed(self._scan_cmd(start), 1)
        heads: tuple[list[bytes], list[bytes], int, float, bytes] | None = None  # keys, bulks, ticket, sent, after
        values: tuple[BatchPlan, int, float, bytes] | None = None  # plan, ticket, sent at, cursor after
        while scan_t is not None or heads is not None or values is not None:
            cursor, keys = self._scan_reply(pipe.recv(scan_t)[0]) if scan_t is not None else (b"0", [])
            plan = None
            plan_after = b"0"
            if heads is not None:
                h_keys, h_bulks, h_ticket, h_sent, plan_after = heads
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
            if pacer.sample_due():  # now: the probe queues behind the batch just sent, as others' requests do
                self.sampler.sample(pacer)
            self._finish(values)  # the server works on what was just sent meanwhile
            scan_t = scan_next if more else None
            heads = (keys, bulks, head_t, sent, cursor) if keys else None
            values = (plan, value_t, sent, plan_after) if plan is not None else None

    def _finish(self, values: tuple[BatchPlan, int, float, bytes] | None) -> None:
        if values is None:
            return
        plan, ticket, _sent, cursor_after = values
        waited = self.pipe.wait_s
        replies = self.pipe.recv(ticket)
        server_s = self.pipe.wait_s - waited + self._head_wait
        rows = self.reader.finish(plan, replies, self.pipe.call)
        self.stats.add(self.db, rows)
        self.sink.write(self.db, rows, cursor_after)
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
