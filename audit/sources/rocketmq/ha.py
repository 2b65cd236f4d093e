"""HA state of a RocketMQ pair and the findings it supports. Pure: text and numbers in, findings out.

The master's lag figure is ``commitLog.getMaxOffset() - push2SlaveMaxOffset`` (docs/formats/rocketmq-commitlog.md).
``push2SlaveMaxOffset`` is the largest 8-byte "ack" any client ever sent to the HA port: it only
rises, and only a master restart resets it. So a negative lag means some peer acked an offset beyond the
master's end, and the ack is ``master max - lag``. Two causes are known:

- a stale slave that reattached to a redeployed master acks its own old max offset (RMQ_STALE_SLAVE);
  its files are then ahead of the master's, and its overlap holds the old master's records;
- any other program that writes 8 bytes to the HA port (telnet, a scanner): its ack is text read as a
  big-endian long, ``"99999999"`` -> 4123389851770370361 (RMQ_FOREIGN_HA_CLIENT). Such numbers are far
  beyond any commit log that can exist.

Inputs, each optional: the max offsets read from both stores' files, the master's broker.log / store.log
lines (both spellings of the lag line: 4.x ``Slave fall behind master: N bytes``, 5.x ``slave fall behind
master Nbytes``, and the ``M - A = N`` form some builds print), saved ``mqadmin haStatus`` output (5.x)
and saved ``mqadmin brokerStatus`` output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from audit.findings import Finding

IMPLAUSIBLE_OFFSET = 1 << 56
"""No broker's commit log reaches this (64 PiB written); an ack at or beyond it did not come from a store."""
PRINTABLE = range(0x20, 0x7F)
TEXT_BYTES = frozenset([*PRINTABLE, 0x09, 0x0A, 0x0D])

_TS = re.compile(r"^\s*(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_LAG = re.compile(
    r"slave fall behind master:?\s*(?:(?P<master>-?\d+)\s*-\s*(?P<ack>-?\d+)\s*=\s*)?(?P<lag>-?\d+)\s*bytes",
    re.IGNORECASE,
)
_REQUEST = re.compile(r"slave\[(?P<client>[^\]]*)\]\s+request offset\s+(?P<offset>-?\d+)")
_STATUS_KV = re.compile(r"^#(?P<key>\w+(?:\(KB/s\))?)\s+(?P<value>\S.*?)\s*$")
_STATUS_ROW = re.compile(
    r"^(?P<addr>\S+)\s+(?P<ack>-?\d+)\s+(?P<diff>-?\d+)\s+(?P<speed>-?[\d.]+)\s+(?P<status>OK|Fall Behind)\s+"
    r"(?P<from>-?\d+)\s*$"
)
_BROKER_STATUS = re.compile(r"^\s*(?:\S+\s+)?(?P<key>[A-Za-z_][\w.]*)\s*:\s?(?P<value>.*?)\s*$")


def _signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def offset_bytes(value: int) -> bytes:
    """The 8 big-endian bytes an HA client sent for this ack offset (Java long, two's complement)."""
    return _signed64(value).to_bytes(8, "big", signed=True)


def decode_ascii_offset(value: int) -> str | None:
    """The ack offset's 8 bytes as text, if every byte is printable ASCII (or tab/CR/LF); else None.

    A broker's offset is a small positive number whose top bytes are zero, so text here means the 8
    bytes came from something that is not a slave: ``decode_ascii_offset(4123389851770370361) == "99999999"``.
    """
    raw = offset_bytes(value)
    return raw.decode("ascii") if all(b in TEXT_BYTES for b in raw) else None


def smallest_printable_at_least(value: int) -> int | None:
    """The smallest offset >= value whose 8 bytes are all printable ASCII (0x20..0x7E), or None.

    With an unknown master max M, a logged lag L only says the ack is M - L for some M >= 0; this gives
    the smallest M (namely the result + L) for which that ack would read as text.
    """
    if value < 0:
        value = 0
    if value > 0x7E7E7E7E7E7E7E7E:
        return None
    digits = list(value.to_bytes(8, "big"))
    for i, b in enumerate(digits):
        if b in PRINTABLE:
            continue
        if b < PRINTABLE.start:
            digits[i:] = [PRINTABLE.start] * (8 - i)
            return int.from_bytes(bytes(digits), "big")
        j = i - 1  # too big: carry into the previous byte, and start over from the smallest tail
        while j >= 0 and digits[j] == PRINTABLE.stop - 1:
            j -= 1
        if j < 0:
            return None
        digits[j] += 1
        digits[j + 1 :] = [PRINTABLE.start] * (7 - j)
        return int.from_bytes(bytes(digits), "big")
    return value


# --- parsers --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LagLine:
    """One ``slave fall behind master`` line of the master's broker.log."""

    lag_bytes: int
    at: str | None = None
    master_max: int | None = None
    """Printed by builds that log ``M - A = N``; otherwise unknown."""
    ack_offset: int | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class RequestLine:
    """``slave[addr] request offset N`` (store.log): the first ack of each HA connection."""

    client: str
    offset: int
    at: str | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class BrokerLog:
    lags: tuple[LagLine, ...] = ()
    requests: tuple[RequestLine, ...] = ()

    @property
    def negative(self) -> tuple[LagLine, ...]:
        return tuple(line for line in self.lags if line.lag_bytes < 0)


def parse_broker_log(lines: Iterable[str]) -> BrokerLog:
    """The HA lines of a broker's log (broker.log and store.log lines may be mixed, in time order)."""
    lags: list[LagLine] = []
    requests: list[RequestLine] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        ts = _TS.match(line)
        at = ts.group(1) if ts else None
        if m := _LAG.search(line):
            master, ack = m.group("master"), m.group("ack")
            lags.append(
                LagLine(
                    lag_bytes=int(m.group("lag")),
                    at=at,
                    master_max=None if master is None else int(master),
                    ack_offset=None if ack is None else int(ack),
                    text=line.strip(),
                )
            )
        elif m := _REQUEST.search(line):
            requests.append(
                RequestLine(client=m.group("client"), offset=int(m.group("offset")), at=at, text=line.strip())
            )
    return BrokerLog(tuple(lags), tuple(requests))


@dataclass(frozen=True, slots=True)
class HaConnection:
    """One row of a master's ``mqadmin haStatus`` table."""

    addr: str
    ack_offset: int
    diff: int
    transfer_kbps: float
    status: str
    transfer_from: int


@dataclass(frozen=True, slots=True)
class HaStatus:
    """One broker's block of ``mqadmin haStatus`` output (HAStatusSubCommand.printStatus)."""

    role: str  # master | slave
    master_addr: str | None = None
    master_max_offset: int | None = None
    slave_num: int | None = None
    in_sync_slave_num: int | None = None
    connections: tuple[HaConnection, ...] = ()
    max_offset: int | None = None
    """A slave's #CommitLogMaxOffset."""
    master_flush_offset: int | None = None
    fields: dict[str, str] = field(default_factory=dict)


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value.strip())
    except ValueError:
        return None


def _status_block(fields: dict[str, str], rows: list[HaConnection]) -> HaStatus:
    role = "master" if "MasterCommitLogMaxOffset" in fields or rows else "slave"
    return HaStatus(
        role=role,
        master_addr=fields.get("MasterAddr"),
        master_max_offset=_int(fields.get("MasterCommitLogMaxOffset")),
        slave_num=_int(fields.get("SlaveNum")),
        in_sync_slave_num=_int(fields.get("InSyncSlaveNum")),
        connections=tuple(rows),
        max_offset=_int(fields.get("CommitLogMaxOffset")),
        master_flush_offset=_int(fields.get("MasterFlushOffset")),
        fields=dict(fields),
    )


def parse_ha_status(text: str) -> list[HaStatus]:
    """Every block of saved ``mqadmin haStatus`` output (one per broker; ``-i`` repeats them)."""
    blocks: list[HaStatus] = []
    fields: dict[str, str] = {}
    rows: list[HaConnection] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#SlaveAddr"):
            continue
        if m := _STATUS_KV.match(line):
            if m.group("key") == "MasterAddr" and fields:
                blocks.append(_status_block(fields, rows))
                fields, rows = {}, []
            fields[m.group("key")] = m.group("value")
        elif m := _STATUS_ROW.match(line):
            rows.append(
                HaConnection(
                    addr=m.group("addr"),
                    ack_offset=int(m.group("ack")),
                    diff=int(m.group("diff")),
                    transfer_kbps=float(m.group("speed")),
                    status=m.group("status"),
                    transfer_from=int(m.group("from")),
                )
            )
    if fields:
        blocks.append(_status_block(fields, rows))
    return blocks


def parse_broker_status(text: str) -> dict[str, str]:
    """Saved ``mqadmin brokerStatus`` output (``%-32s: %s`` lines) as a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if m := _BROKER_STATUS.match(line):
            out[m.group("key")] = m.group("value")
    return out


def max_offset_from_status(text: str) -> int | None:
    """commitLogMaxOffset from brokerStatus output, or the max offset a haStatus block reports."""
    if (value := _int(parse_broker_status(text).get("commitLogMaxOffset"))) is not None:
        return value
    for block in parse_ha_status(text):
        value = block.master_max_offset if block.role == "master" else block.max_offset
        if value is not None:
            return value
    return None


# --- detectors ------------------------------------------------------------------------------------------


def _ack_evidence(
    ack: int | None, ack_min: int, master_max: int | None, replica_max: int | None, implausible: int
) -> dict[str, Any]:
    text = None if ack is None else decode_ascii_offset(ack)
    ev: dict[str, Any] = {
        "ack_offset": ack,
        "ack_offset_min": ack if ack is not None else ack_min,
        "ack_ascii": text,
        "ack_is_ascii": text is not None,
        "ack_implausible": (ack if ack is not None else ack_min) >= implausible,
        "ack_hex": None if ack is None else offset_bytes(ack).hex(),
        "replica_max_offset": replica_max,
        "replica_ahead": None if master_max is None or replica_max is None else replica_max > master_max,
        "ack_matches_replica_max": None if ack is None or replica_max is None else ack == replica_max,
    }
    if ack is None and not ev["ack_implausible"]:
        return ev
    if ack is None:  # the master max at the line is unknown: when would the ack have been text?
        first = smallest_printable_at_least(ack_min)
        if first is not None:
            ev["ascii_if_master_max_at_least"] = first - ack_min
            ev["ascii_at_that_master_max"] = offset_bytes(first).decode("ascii")
    return ev


def _episodes(lines: Sequence[LagLine]) -> list[list[LagLine]]:
    """Consecutive negative lines with the same ack: one episode each (the ack only changes upwards)."""
    groups: list[list[LagLine]] = []
    for line in lines:
        if groups and groups[-1][-1].ack_offset == line.ack_offset:
            groups[-1].append(line)
        else:
            groups.append([line])
    return groups


def _request_for(episode: list[LagLine], requests: Sequence[RequestLine], master_max: int | None) -> RequestLine | None:
    """The logged first ack that explains an episode whose lines do not print the ack themselves."""
    last = episode[-1]
    fits = [
        r
        for r in requests
        if (r.at is None or last.at is None or r.at <= last.at)
        and r.offset + last.lag_bytes >= 0
        and (master_max is None or r.offset + last.lag_bytes <= master_max)
    ]
    return max(fits, key=lambda r: r.offset) if fits else None  # push2SlaveMaxOffset: the largest ack


def _log_findings(log: BrokerLog, master_max: int | None, replica_max: int | None, implausible: int) -> list[Finding]:
    out = []
    for episode in _episodes(log.negative):
        last = episode[-1]
        ack, line_master, client = last.ack_offset, last.master_max, None
        if ack is None and (request := _request_for(episode, log.requests, master_max)) is not None:
            ack, client = request.offset, request.client
        elif ack is not None:
            client = next((r.client for r in log.requests if r.offset == ack), None)
        if ack is not None and line_master is None:
            line_master = ack + last.lag_bytes
        ev = _ack_evidence(ack, -last.lag_bytes, master_max, replica_max, implausible)
        ev.update(
            source="broker_log",
            lag_bytes=last.lag_bytes,
            master_max_offset=line_master,
            master_max_offset_now=master_max,
            client=client,
            first_seen=episode[0].at,
            last_seen=last.at,
            negative_lines=len(episode),
            line=last.text,
        )
        out.append(
            Finding(
                "ha",
                "negative_lag",
                start=None if line_master is None else str(line_master),
                end=None if ack is None else str(ack),
                start_num=line_master,
                end_num=ack,
                bytes=-last.lag_bytes,
                evidence=ev,
            )
        )
    return out


def _status_findings(
    blocks: Sequence[HaStatus], replica_max: int | None, replica_addr: str | None, implausible: int
) -> list[Finding]:
    out = []
    for block in blocks:
        for conn in block.connections:
            if conn.diff >= 0:
                continue
            master_max = block.master_max_offset if block.master_max_offset is not None else conn.ack_offset + conn.diff
            ev = _ack_evidence(conn.ack_offset, conn.ack_offset, master_max, replica_max, implausible)
            ev.update(
                source="ha_status",
                lag_bytes=conn.diff,
                master_max_offset=master_max,
                master_addr=block.master_addr,
                client=conn.addr,
                client_is_replica=None if replica_addr is None else _same_host(conn.addr, replica_addr),
                status=conn.status,
                status_ok=conn.status == "OK",
                in_sync_slave_num=block.in_sync_slave_num,
            )
            out.append(
                Finding(
                    "ha",
                    "negative_lag",
                    start=str(master_max),
                    end=str(conn.ack_offset),
                    start_num=master_max,
                    end_num=conn.ack_offset,
                    bytes=-conn.diff,
                    evidence=ev,
                )
            )
    return out


def _same_host(a: str, b: str) -> bool:
    def host(x: str) -> str:
        return x.strip().lstrip("/").rpartition(":")[0].strip("[]") or x.strip().lstrip("/")

    return host(a) == host(b)


def replica_ahead_finding(
    master_max: int | None, replica_max: int | None, *, master_min: int | None = None, acks: Sequence[int] = ()
) -> Finding | None:
    """`replica_ahead` when the replica's files end beyond the master's: it holds bytes the master never wrote.

    After a master redeploy a stale slave keeps the old master's log and reports its old max offset; the
    new master then sends nothing until it catches up (docs/formats/rocketmq-commitlog.md, "HA").
    """
    if master_max is None or replica_max is None or replica_max <= master_max:
        return None
    ev: dict[str, Any] = {
        "master_max_offset": master_max,
        "replica_max_offset": replica_max,
        "master_min_offset": master_min,
        "ahead_bytes": replica_max - master_max,
        "replica_ahead": True,
        "ack_matches_replica_max": (replica_max in acks) if acks else None,
    }
    return Finding(
        "ha",
        "replica_ahead",
        start=str(master_max),
        end=str(replica_max),
        start_num=master_max,
        end_num=replica_max,
        bytes=replica_max - master_max,
        evidence=ev,
    )


def ha_findings(
    *,
    master_max: int | None,
    replica_max: int | None,
    master_min: int | None = None,
    log: BrokerLog | None = None,
    ha_status: Sequence[HaStatus] = (),
    replica_addr: str | None = None,
    implausible: int = IMPLAUSIBLE_OFFSET,
) -> list[Finding]:
    """replica_ahead (from the two stores' max offsets) and negative_lag (from the log and haStatus)."""
    from_log = [] if log is None else _log_findings(log, master_max, replica_max, implausible)
    from_status = _status_findings(ha_status, replica_max, replica_addr, implausible)
    acks = [f.evidence["ack_offset"] for f in (*from_log, *from_status) if f.evidence.get("ack_offset") is not None]
    ahead = replica_ahead_finding(master_max, replica_max, master_min=master_min, acks=acks)
    return [*([] if ahead is None else [ahead]), *from_log, *from_status]
