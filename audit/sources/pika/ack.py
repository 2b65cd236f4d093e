"""Pika's replica acknowledgement for the live recheck: per-db binlog positions (audit/sources/redis/ack.py).

A healthy slave writes each master record at the same (filenum, offset) in its own binlog, so once the
slave's `binlog_offset` of a db is at or past the master's (taken right after the master's read), the
slave has applied everything the master had for that db when it was read.
"""

from __future__ import annotations

from typing import Any

from audit.sources.pika.info import parse_pika_replication
from audit.sources.redis.resp import RespPipe


def _positions(pipe: RespPipe, dbs: list[int]) -> tuple[dict[int, tuple[int, int]], str | None]:
    reply = pipe.execute([(b"INFO", b"replication")])[0]
    rep = parse_pika_replication(reply if isinstance(reply, bytes) else b"")
    found = {d: (o.filenum, o.offset) for d, o in rep.binlog.items() if d in dbs}
    return found, rep.master_link_status


class PikaBinlogAck:
    def __init__(self, dbs: list[int]) -> None:
        self.dbs = dbs

    def mark(self, master: RespPipe) -> dict[int, tuple[int, int]]:
        return _positions(master, self.dbs)[0]

    def reached(self, replica: RespPipe, mark: Any) -> bool:
        done, link = _positions(replica, self.dbs)
        if link not in (None, "up") or not mark:
            return False
        return all(d in done and done[d] >= pos for d, pos in mark.items())
