"""A Pika face on a real redis-server, for tests: no Pika server can be installed here.

Only what a real Pika 4.0 does differently is changed (as listed here); every other command
goes to the real redis-server behind it:
- DUMP, OBJECT, DEBUG, EVAL, MEMORY, ROLE, READONLY: `ERR unknown command`;
- CLIENT SETINFO: `ERR Syntax error`; CLIENT LIST: `addr=… fd=… idle=…` only;
- PTTL/TTL of a missing key: 0 instead of -2;
- HELLO: a flat list (what makes redis-py's RESP3 handshake fail on Pika);
- INFO: Pika's format (`pika_version`, `# Replication(MASTER)`, per-DB `db0:binlog_offset=F O`, the
  slave's `repl_connect_status:` block), the offsets read from the binlog manifests given.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import hiredis

from audit.local.redis_server import free_port

UNKNOWN = {b"dump", b"object", b"debug", b"eval", b"memory", b"role", b"readonly"}


def reply_end(buf: bytes, pos: int) -> int | None:
    """End of the RESP2 reply starting at `pos`, or None if `buf` does not hold all of it yet."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    kind, head = buf[pos : pos + 1], nl + 2
    if kind in (b"+", b"-", b":"):
        return head
    n = int(buf[pos + 1 : nl])
    if kind == b"$":
        end = head + n + 2 if n >= 0 else head
        return end if end <= len(buf) else None
    end: int | None = head
    for _ in range(max(n, 0)):
        assert end is not None
        end = reply_end(buf, end)
        if end is None:
            return None
    return end


def _bulk(text: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(text), text)


def manifest_offsets(log_dir: Path | None, dbs: list[int]) -> dict[int, tuple[int, int]]:
    out = {}
    for d in dbs:
        path = log_dir / f"log_db{d}" / "manifest" if log_dir else None
        if path is not None and path.exists():
            num, off = struct.unpack_from("<IQ", path.read_bytes())
            out[d] = (num, off)
        else:
            out[d] = (0, 0)
    return out


class PikaFront:
    """Listens on its own port; forwards to `upstream_port`. `info_replication()` writes the INFO text."""

    def __init__(self, upstream_port: int, info_replication: Callable[[], str]) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.info_replication = info_replication
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> PikaFront:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        parser = hiredis.Reader()
        upstream_buf = b""
        try:
            while data := await reader.read(1 << 16):
                parser.feed(data)
                commands = []
                while (cmd := parser.gets()) is not False:
                    commands.append(cmd)
                answers: list[bytes | None] = []
                forwarded: list[bytes] = []
                for cmd in commands:
                    local = self._local(cmd)
                    answers.append(local)
                    if local is None:
                        forwarded.append(cmd[0].lower())
                        up_w.write(hiredis.pack_command(tuple(cmd)))
                replies: list[bytes] = []
                pos = 0
                while len(replies) < len(forwarded):
                    end = reply_end(upstream_buf, pos)
                    if end is None:
                        upstream_buf = upstream_buf[pos:]
                        pos = 0
                        upstream_buf += await up_r.read(1 << 16)
                        continue
                    replies.append(self._adjust(forwarded[len(replies)], upstream_buf[pos:end]))
                    pos = end
                upstream_buf = upstream_buf[pos:]
                it = iter(replies)
                writer.write(b"".join(a if a is not None else next(it) for a in answers))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            up_w.close()
            writer.close()

    def _local(self, cmd: list[bytes]) -> bytes | None:
        name = cmd[0].lower()
        sub = cmd[1].lower() if len(cmd) > 1 else b""
        if name in UNKNOWN:
            return b"-ERR unknown command '%s'\r\n" % cmd[0]
        if name == b"hello":
            return b"*4\r\n" + _bulk(b"server") + _bulk(b"pika") + _bulk(b"version") + _bulk(b"4.0.0")
        if name == b"client" and sub == b"setinfo":
            return b"-ERR Syntax error\r\n"
        if name == b"client" and sub == b"list":
            return _bulk(b"addr=127.0.0.1:50000 fd=12 idle=0\n")
        if name == b"info":
            return _bulk(self._info(sub.decode() or "all").replace("\n", "\r\n").encode())
        return None

    def _info(self, section: str) -> str:
        parts = []
        if section in ("server", "all", "default"):
            parts.append(f"# Server\npika_version:4.0.0\nredis_version:\ntcp_port:{self.port}\n")
        if section in ("replication", "all", "default"):
            parts.append(self.info_replication())
        if section in ("keyspace", "all", "default"):
            parts.append("# Keyspace\n# Time:1970-01-01 00:00:00\n")
        return "\n".join(parts)

    @staticmethod
    def _adjust(name: bytes, reply: bytes) -> bytes:
        if name in (b"pttl", b"ttl") and reply == b":-2\r\n":
            return b":0\r\n"
        return reply


def master_info(log_dir: Path | None, dbs: list[int], slave_port: int) -> Callable[[], str]:
    def text() -> str:
        offsets = manifest_offsets(log_dir, dbs)
        lag = "".join(f"(db{d}:0)" for d in dbs)
        lines = [
            "# Replication(MASTER)",
            "role:master",
            "ReplicationID:d77e4a521800d9dc619df52612a484f44c597",
            "connected_slaves:1",
            f"slave0:ip=127.0.0.1,port={slave_port},conn_fd=155,lag={lag}",
            "is_eligible_for_master_election:true",
        ]
        lines += [f"db{d}:binlog_offset={f} {o},safety_purge=none" for d, (f, o) in offsets.items()]
        return "\n".join(lines) + "\n"

    return text


def slave_info(log_dir: Path | None, dbs: list[int], master_port: int) -> Callable[[], str]:
    def text() -> str:
        offsets = manifest_offsets(log_dir, dbs)
        lines = [
            "# Replication(SLAVE)",
            "role:slave",
            "ReplicationID:d77e4a521800d9dc619df52612a484f44c597",
            "master_host:127.0.0.1",
            f"master_port:{master_port}",
            "master_link_status:up",
            "repl_connect_status:",
            *[f"db{d}:connected" for d in dbs],
            "slave_priority:100",
            "slave_read_only:1",
        ]
        lines += [f"db{d}:binlog_offset={f} {o},safety_purge=none" for d, (f, o) in offsets.items()]
        return "\n".join(lines) + "\n"

    return text


def start_pika_pair(
    master_port: int, replica_port: int, dbs: list[int], master_log: Path | None = None, replica_log: Path | None = None
) -> tuple[PikaFront, PikaFront]:
    """Two Pika faces over a real redis master/replica pair; each names the other's front port."""
    m_port, s_port = free_port(), free_port()
    master = PikaFront(master_port, master_info(master_log, dbs, s_port))
    slave = PikaFront(replica_port, slave_info(replica_log, dbs, m_port))
    master.port, slave.port = m_port, s_port
    return master.start(), slave.start()
