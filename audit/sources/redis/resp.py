"""Pipelined RESP2 over a connection redis-py has already set up (auth, TLS, SELECT).

The snapshot sends thousands of commands per batch; redis-py's pipeline spends several microseconds of
Python per command, which alone would cap a snapshot near 60k keys/s. Here commands are packed with
one ``bytes.join`` each and replies come straight out of hiredis' C reader, which returns error
replies as values instead of raising, so one bad key never desynchronises the stream.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import hiredis
import redis

from audit.ratelimit import RateLimiter

Command = Sequence[bytes]

_READ_SIZE = 1 << 20


def pack(commands: Sequence[Command]) -> bytes:
    """RESP2 arrays of bulk strings for every command, concatenated (hiredis' C packer: 2.5x Python's)."""
    # hiredis types its argument as a 1-tuple; any tuple of bytes is what it packs
    return b"".join([hiredis.pack_command(tuple(cmd)) for cmd in commands])  # type: ignore[arg-type]


class RespPipe:
    """Send a batch of commands, get a list of replies (``hiredis.ReplyError`` for error replies)."""

    def __init__(self, client: redis.Redis, limiter: RateLimiter | None = None) -> None:
        self._conn = client.connection_pool.make_connection()
        self._conn.connect()
        sock = getattr(self._conn, "_sock", None)
        if sock is None:
            raise RuntimeError("redis-py connection has no socket; pin redis<9 (see constraints.txt)")
        self._sock: socket.socket = sock
        self._reader = hiredis.Reader()
        self._limiter = limiter
        self.commands_sent = 0

    def execute(self, commands: Sequence[Command]) -> list[Any]:
        if not commands:
            return []
        if self._limiter is not None:
            self._limiter.acquire(len(commands))
        self._sock.sendall(pack(commands))
        self.commands_sent += len(commands)
        replies: list[Any] = []
        want = len(commands)
        reader = self._reader
        while True:
            reply = reader.gets()
            while reply is not False:
                replies.append(reply)
                if len(replies) == want:
                    return replies
                reply = reader.gets()
            data = self._sock.recv(_READ_SIZE)
            if not data:
                raise ConnectionError("server closed the connection")
            reader.feed(data)

    def close(self) -> None:
        self._conn.disconnect()
