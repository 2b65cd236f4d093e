"""Pipelined RESP2 over a connection redis-py has already set up (auth, TLS, SELECT).

The snapshot sends thousands of commands per batch; redis-py's pipeline spends several microseconds of
Python per command, which alone would cap a snapshot near 60k keys/s. Here commands are packed as
bytes (one ``bytes.join`` per batch, the key's bulk string built once and reused by every command on
it) and replies come straight out of hiredis' C reader, which returns error replies as values instead
of raising, so one bad key never desynchronises the stream.

Requests can overlap: :meth:`RespPipe.send` returns a ticket at once and :meth:`RespPipe.recv` waits
for that ticket's replies, buffering the replies of earlier tickets it has to read past. The snapshot
keeps the next batch in flight while it digests the last one, so the server and the client work at
the same time; a big key's extra pages (:meth:`RespPipe.call`) can be read while a batch is in flight.
"""

from __future__ import annotations

import select
import socket
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
import redis

from audit.errors import SourceError

Command = Sequence[bytes]

_READ_SIZE = 1 << 20


def pack(commands: Sequence[Command]) -> bytes:
    """RESP2 arrays of bulk strings for every command, concatenated (hiredis' C packer: 2.5x Python's)."""
    # hiredis types its argument as a 1-tuple; any tuple of bytes is what it packs
    return b"".join([hiredis.pack_command(tuple(cmd)) for cmd in commands])  # type: ignore[arg-type]


def bulk(arg: bytes) -> bytes:
    """One RESP bulk string: ``$<len>\\r\\n<arg>\\r\\n``."""
    return b"$%d\r\n%b\r\n" % (len(arg), arg)


def command_prefix(name: bytes, argc: int) -> bytes:
    """The array header and command name of a command of `argc` words in all (name included)."""
    return b"*%d\r\n%b" % (argc, bulk(name))


IDLE_PROBE_S = 0.5
"""A pipe idle this long is probed for a close before it sends (one select call): not on every batch of a
snapshot, and not on a TLS connection's first send, whose unread session tickets also read as readable."""


class RespPipe:
    """Send batches of commands, get lists of replies (``hiredis.ReplyError`` for error replies)."""

    def __init__(self, client: redis.Redis) -> None:
        # built from the pool's settings but not taken from it: a connection the pool made counts against
        # its max_connections (100 in redis-py 8) until the pool itself disconnects, so a client that
        # opened a pipe per snapshot would be refused its 101st with "Too many connections"
        pool = client.connection_pool
        self._conn = pool.connection_class(**pool.connection_kwargs)
        self._conn.connect()
        sock = getattr(self._conn, "_sock", None)
        if sock is None:
            raise RuntimeError("redis-py connection has no socket; pin redis<9 (see constraints.txt)")
        self._sock: socket.socket = sock
        self._reader = hiredis.Reader()
        self._selected: bytes | None = None  # the db of the last SELECT sent, chosen again on a new connection
        self._sent_at = time.monotonic()  # the last send: a connection busy since is not probed for a close
        self._next_ticket = 0
        self._in_flight: deque[tuple[int, int]] = deque()  # (ticket, reply count), in send order
        self._done: dict[int, list[Any]] = {}  # replies read past while waiting for a later ticket
        self.commands_sent = 0
        self.wait_s = 0.0  # time spent blocked in recv: the server (or the network) was the bottleneck

    # -- overlapped use -------------------------------------------------------------------------------

    def send_packed(self, payload: bytes, n_replies: int) -> int:
        """Send already packed commands that produce `n_replies` replies; returns their ticket."""
        ticket = self._next_ticket
        self._next_ticket += 1
        if n_replies:
            self._revive_if_closed()
            self._sock.sendall(payload)
            self._in_flight.append((ticket, n_replies))
            self.commands_sent += n_replies
        else:
            self._done[ticket] = []
        return ticket

    def send_parts(self, parts: Sequence[tuple[bytes, int]]) -> list[int]:
        """Several packed requests, (payload, reply count) each, in one write; a ticket for each."""
        tickets = []
        for _payload, n in parts:
            ticket = self._next_ticket
            self._next_ticket += 1
            tickets.append(ticket)
            if n:
                self._in_flight.append((ticket, n))
                self.commands_sent += n
            else:
                self._done[ticket] = []
        data = b"".join([p for p, n in parts if n])
        if data:
            self._revive_if_closed()
            self._sock.sendall(data)
        return tickets

    def send(self, commands: Sequence[Command]) -> int:
        if len(commands) == 1 and commands[0][0] == b"SELECT":  # always sent alone
            self._selected = commands[0][1]
        return self.send_packed(pack(commands) if commands else b"", len(commands))

    def _revive_if_closed(self) -> None:
        """Connect again if the server closed this connection while nothing was in flight.

        A server with `timeout N` closes a client idle for N seconds, and the recheck's pipes wait between
        rounds (`recheck_interval_s`, the replica's ack): every read after the wait failed, ending the audit
        with no verdict. Only reads are sent, so a new connection (AUTH, the URL's db, READONLY: redis-py's
        set-up) that SELECTs the pipe's db again loses nothing. With requests in flight a closed connection
        stays an error: their replies are lost."""
        now, sent_at = time.monotonic(), self._sent_at
        self._sent_at = now
        if self._in_flight or now - sent_at < IDLE_PROBE_S:
            return  # busy: no server closes a client idle for less than a second (`timeout` counts seconds)
        if not select.select([self._sock], [], [], 0)[0]:
            return  # readable with nothing asked for: the server's EOF (or TLS close_notify) is waiting
        self._conn.disconnect()
        self._conn.connect()
        self._sock = self._conn._sock
        self._reader = hiredis.Reader()
        if self._selected is not None:
            self._sock.sendall(pack([(b"SELECT", self._selected)]))
            if isinstance(reply := self._read(1)[0], hiredis.ReplyError):
                raise reply

    def recv(self, ticket: int) -> list[Any]:
        """The replies of `ticket`, reading (and keeping) those of earlier tickets first."""
        while ticket not in self._done:
            head, n = self._in_flight.popleft()
            self._done[head] = self._read(n)
        return self._done.pop(ticket)

    def call(self, command: Command) -> Any:
        """One command, its reply (a ReplyError is returned, not raised); other tickets stay pending."""
        return self.recv(self.send([command]))[0]

    # -- one batch at a time --------------------------------------------------------------------------

    def select(self, db: int) -> None:
        """SELECT `db`, an error naming the server if it refuses: the reads that follow would read the db
        selected before, taking its keys (or their absence) for this db's."""
        reply = self.execute([(b"SELECT", b"%d" % db)])[0]
        if isinstance(reply, hiredis.ReplyError):
            raise SourceError(f"{self.where}: SELECT {db} refused: {reply}", where=self.where)

    def execute(self, commands: Sequence[Command]) -> list[Any]:
        if not commands:
            return []
        return self.recv(self.send(commands))

    def _read(self, want: int) -> list[Any]:
        replies: list[Any] = []
        append = replies.append
        reader = self._reader
        gets = reader.gets
        while True:
            reply = gets()
            while reply is not False:
                append(reply)
                if len(replies) == want:
                    return replies
                reply = gets()
            started = time.perf_counter()
            data = self._sock.recv(_READ_SIZE)
            self.wait_s += time.perf_counter() - started
            if not data:
                raise ConnectionError(f"{self.where} closed the connection")
            reader.feed(data)

    @property
    def where(self) -> str:
        """The server's host:port (a unix socket's path), for errors: the driver's own words name none."""
        c = self._conn
        return str(getattr(c, "path", "") or f"{getattr(c, 'host', '?')}:{getattr(c, 'port', '?')}")

    def close(self) -> None:
        self._conn.disconnect()
