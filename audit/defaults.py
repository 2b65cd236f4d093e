"""Defaults, one constant per setting. The inventory's `defaults:` block and CLI options override them."""

from __future__ import annotations

SCAN_COUNT = 1000
"""COUNT hint for SCAN; also the size of one pipelined batch of keys."""

BIG_KEY_ELEMENTS = 10000
"""A key with more elements (or bytes, for strings) than this is streamed in windows of this size."""

STRING_WINDOW_BYTES = 1 << 20
"""GETRANGE window for big strings, so one read never holds more than this."""

RECHECK_ROUNDS = 3
"""How many times keys that differ are re-read on both sides before they count as divergent."""

RECHECK_INTERVAL_S = 2.0
"""Seconds between recheck rounds."""

RECHECK_ACK_WAIT_S = 5.0
"""Seconds the recheck waits for a replica to apply the master's replication position before reading it."""

RECHECK_MAX_KEYS = 100_000
"""At most this many diverged keys are re-read live; the rest are reported as found, marked unrechecked."""

TTL_TOLERANCE_MS = 2000
"""Absolute expiry times (read time + PTTL) that differ by less than this are equal: read skew, not drift."""

MAX_LAG_BYTES = 10 * 1024 * 1024
"""Replication lag in bytes above which a pair is `lagging`."""

MAX_LAG_SECONDS = 30
"""Seconds since the replica last heard from its master above which a pair is `lagging`."""

SPARK_MASTER = "local[*]"
"""Spark master URL; any cluster URL works (spark://, yarn, k8s://) by configuration."""

CONNECT_TIMEOUT_S = 5.0
"""Socket connect timeout for servers."""

HISTORY_READ_TIMEOUT_S = 120.0
"""The longest a MySQL history store may take to answer one request (its greeting included), above
InnoDB's 50 s lock wait, whose error the append retries: a port where another server listens (a Redis
one says nothing first) held a run at its end for ever."""

PARQUET_ROWS_PER_GROUP = 50_000
"""Rows buffered before a Parquet row group is flushed: bounds snapshot memory."""

FINDINGS_SAMPLE = 50
"""Findings per category shown in the summary and the report (totals are always complete)."""
