"""Judging a key while it is written: has the replica applied what the master had when it was read?

A key that differs may only be in flight. Rather than dropping every key whose master value moves (a
key written all the time would then never be judged, and could hide a broken replica), the recheck
asks the replication stream: it takes the master's replication position right after reading the
master's values, waits (bounded) until the replica has applied at least that position, and only then
reads the replica. A difference that remains while the master's value did not change in between is a
divergence, not lag.

A kind gives its own :class:`ReplicaAck`: Redis compares `master_repl_offset` with the replica's
`slave_repl_offset`; Pika compares per-db binlog positions. Two independent servers (a migration,
`check_replication: false`) have no such relation, and the recheck falls back to re-reading in rounds.
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
    """Redis: the master's `master_repl_offset` against the replica's processed `slave_repl_offset`."""

    def mark(self, master: RespPipe) -> int | None:
        return as_int(info_replication(master).get("master_repl_offset"))

    def reached(self, replica: RespPipe, mark: Any) -> bool:
        info = info_replication(replica)
        done = as_int(info.get("slave_repl_offset"))
        return info.get("master_link_status") == "up" and done is not None and mark is not None and done >= mark


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
