"""Judging a key while it is written: has the replica applied what the master had when it was read?

A key that differs may only be in flight. Rather than dropping every key whose master value moves (a
key written all the time would then never be judged, and could hide a broken replica), the recheck
asks the replication stream: it takes the master's replication position right after reading the
master's values, waits (bounded) until the replica has applied at least that position, and only then
reads the replica. A difference that remains while the master's value did not change in between is a
divergence, not lag.

A kind gives its own :class:`ReplicaAck`: Redis compares `master_repl_offset` with the replica's
`slave_repl_offset` within one replication id; Pika compares per-db binlog positions. Two independent
servers (a migration, `check_replication: false`) have no such relation, and the recheck falls back to
re-reading in rounds.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from audit.sources.redis.info import as_int, parse_info
from audit.sources.redis.resp import RespPipe


class ReplicaAck(Protocol):
    def mark(self, master: RespPipe) -> Any:
        """The master's replication position now (read right after the master's values)."""

    def reached(self, replica: RespPipe, mark: Any) -> bool:
        """Whether the replica has applied everything up to `mark`."""


def info_replication(pipe: RespPipe) -> dict[str, Any]:
    reply = pipe.execute([(b"INFO", b"replication")])[0]
    return parse_info(reply if isinstance(reply, bytes) else b"")


class RedisOffsetAck:
    """Redis: the master's `master_repl_offset` against the replica's processed `slave_repl_offset`, in the
    same replication stream: a replica shares its master's `master_replid`. An offset of another stream
    (the replica re-pointed at another server, or promoted, mid-audit) says nothing about this master's
    writes: compared alone, one further on "acked" every key, and each difference was confirmed live."""

    def mark(self, master: RespPipe) -> tuple[str | None, int | None]:
        info = info_replication(master)
        return _replid(info), as_int(info.get("master_repl_offset"))

    def reached(self, replica: RespPipe, mark: Any) -> bool:
        replid, offset = mark
        info = info_replication(replica)
        done = as_int(info.get("slave_repl_offset"))
        if not same_stream(replid, _replid(info)):
            return False
        return info.get("master_link_status") == "up" and done is not None and offset is not None and done >= offset


def _replid(info: dict[str, Any]) -> str | None:
    value = info.get("master_replid")
    return str(value) if value is not None else None


def same_stream(a: str | None, b: str | None) -> bool:
    """Whether two replication ids name one stream (a server before Redis 4.0 shows none: not judged)."""
    return a is None or b is None or a == b


def wait_for(ack: ReplicaAck, replica: RespPipe, mark: Any, timeout_s: float, poll_s: float = 0.01) -> bool:
    """Poll until the replica has applied `mark`, at most `timeout_s`; False if it has not by then."""
    deadline = time.monotonic() + timeout_s
    while True:
        if ack.reached(replica, mark):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
        poll_s = min(poll_s * 2, 0.2)
