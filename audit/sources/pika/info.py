"""Pika's `INFO replication`, both formats. Pure: text in, frozen dataclasses out.

Pika prints one `binlog_offset` per database, and the separator changed in v3.5.3 (PR #2384):

    db0:binlog_offset=2 384,safety_purge=none            (v3.5.3 and later, 4.0)
    db0 binlog_offset=179 30537223,safety_purge=write2file169   (before)

A master lists its slaves as `slave0:ip=..,port=..,conn_fd=..,lag=(db0:0)(db1:1234)` where each lag is
a byte count, `full syncing` or `not syncing`, measured against what the master *sent*, not what the
slave acked. A slave prints `repl_connect_status:` followed by one `dbN:<state>` line per database
(4.0), and `db_repl_state:(db0:WaitDBSync)...` only when some database is not connected.
`slave_repl_offset` sums over all databases, so only the per-DB offsets are compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BINLOG_LINE = re.compile(
    r"^(?P<db>db\d+)[: ]binlog_offset=(?P<filenum>\d+) (?P<offset>\d+)(?:,safety_purge=(?P<purge>\S*))?$"
)
_LAG_ITEM = re.compile(r"\((?P<db>db\d+):(?P<value>[^)]*)\)")
_PAREN_ITEM = _LAG_ITEM
_SLAVE_NAME = re.compile(r"^slave\d+$")
_DB_STATE = re.compile(r"^(?P<db>db\d+):(?P<state>[A-Za-z_]+)$")


@dataclass(frozen=True, slots=True)
class BinlogOffset:
    filenum: int
    offset: int
    safety_purge: str | None = None

    @property
    def position(self) -> int:
        """`filenum << 32 | offset`, the findings schema's number for a Pika position."""
        return self.filenum << 32 | self.offset

    def __str__(self) -> str:
        return f"{self.filenum}:{self.offset}"


@dataclass(frozen=True, slots=True)
class SlaveEntry:
    """One `slaveN:` line of a master: lag per database, an int (bytes) or a state string."""

    ip: str
    port: int | None
    conn_fd: int | None
    lag: dict[int, int | str]


@dataclass(frozen=True, slots=True)
class PikaReplication:
    role: str
    master_host: str | None = None
    master_port: int | None = None
    master_link_status: str | None = None
    replication_id: str | None = None
    repl_connect_status: dict[int, str] = field(default_factory=dict)
    db_repl_state: dict[int, str] = field(default_factory=dict)
    binlog: dict[int, BinlogOffset] = field(default_factory=dict)
    slaves: tuple[SlaveEntry, ...] = ()
    slave_repl_offset: int | None = None

    @property
    def is_slave(self) -> bool:
        return "slave" in self.role


def _db(name: str) -> int:
    return int(name[2:])


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _slave_entry(value: str) -> SlaveEntry:
    fields: dict[str, str] = {}
    for part in re.split(r",(?=\w+=)", value):
        name, _, v = part.partition("=")
        fields[name.strip()] = v.strip()
    lag: dict[int, int | str] = {}
    for m in _LAG_ITEM.finditer(fields.get("lag", "")):
        raw = m["value"].strip()
        lag[_db(m["db"])] = int(raw) if raw.isdigit() else raw
    return SlaveEntry(
        ip=fields.get("ip", ""), port=_int(fields.get("port")), conn_fd=_int(fields.get("conn_fd")), lag=lag
    )


def parse_pika_replication(raw: bytes | str) -> PikaReplication:
    """`INFO replication` (or `INFO all`) text of a Pika server -> :class:`PikaReplication`."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    plain: dict[str, str] = {}
    connect: dict[int, str] = {}
    repl_state: dict[int, str] = {}
    binlog: dict[int, BinlogOffset] = {}
    slaves: list[SlaveEntry] = []
    in_connect_block = False
    for line in (ln.strip() for ln in text.splitlines()):
        if not line or line.startswith("#"):
            in_connect_block = False
            continue
        if m := _BINLOG_LINE.match(line):
            binlog[_db(m["db"])] = BinlogOffset(int(m["filenum"]), int(m["offset"]), m["purge"])
            in_connect_block = False
            continue
        if in_connect_block and (m := _DB_STATE.match(line)):
            connect[_db(m["db"])] = m["state"]
            continue
        in_connect_block = False
        name, sep, value = line.partition(":")
        if not sep:
            continue
        if name == "repl_connect_status":
            in_connect_block = True
        elif name == "db_repl_state":
            repl_state = {_db(m["db"]): m["value"] for m in _PAREN_ITEM.finditer(value)}
        elif _SLAVE_NAME.match(name):
            slaves.append(_slave_entry(value))
        else:
            plain[name] = value.strip()
    return PikaReplication(
        role=plain.get("role", ""),
        master_host=plain.get("master_host"),
        master_port=_int(plain.get("master_port")),
        master_link_status=plain.get("master_link_status"),
        replication_id=plain.get("ReplicationID"),
        repl_connect_status=connect,
        db_repl_state=repl_state,
        binlog=binlog,
        slaves=tuple(slaves),
        slave_repl_offset=_int(plain.get("slave_repl_offset")),
    )


def is_pika(info_server: dict[str, object]) -> bool:
    """Whether `INFO server` (parsed) comes from Pika: it prints `pika_version`."""
    return "pika_version" in info_server
