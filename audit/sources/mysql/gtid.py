"""GTID sets of both flavours as interval sets. Pure functions, no I/O.

MySQL (`@@gtid_executed`): `uuid:1-5:7-9,uuid2:1-3`, newlines allowed after commas; since 8.3 a
tag may switch the source inside one uuid's list (`uuid:1-5:tag:1-2` is `uuid:1-5` plus `uuid:tag:1-2`).
Each source (uuid, or uuid:tag) owns a set of transaction numbers.

MariaDB (`@@gtid_binlog_pos`, `@@gtid_slave_pos`, `@@gtid_current_pos`): `domain-server-seq`, one
per replication domain. A position says "every transaction of this domain up to `seq` is applied":
the domain's sequence numbers are one total order whichever server wrote them, so the set is
`domain: [1, seq]`, and the server of the last GTID is kept for display only.
`@@gtid_binlog_state` lists the last seq of every (domain, server) that wrote into a binlog; it is
what tells a transaction written on a replica itself (an errant one) from a replicated one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from audit.errors import ParseError

Flavor = Literal["mysql", "mariadb"]
Intervals = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-adjacent closed intervals [start, end] of transaction numbers (start >= 1)."""

_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_TAG = re.compile(r"^[a-z_][a-z0-9_]{0,31}$", re.IGNORECASE)
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def normalize(intervals: Iterable[tuple[int, int]]) -> Intervals:
    """Sort and merge overlapping or adjacent intervals."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def subtract_intervals(a: Intervals, b: Intervals) -> Intervals:
    """The numbers in `a` and not in `b`."""
    out: list[tuple[int, int]] = []
    j = 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] < cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] <= end and cur <= end:
            if b[k][0] > cur:
                out.append((cur, b[k][0] - 1))
            cur = max(cur, b[k][1] + 1)
            k += 1
        if cur <= end:
            out.append((cur, end))
    return tuple(out)


def size(intervals: Intervals) -> int:
    return sum(end - start + 1 for start, end in intervals)


@dataclass(frozen=True)
class GtidRange:
    """One contiguous run of transactions of one source: a finding's `start`/`end`."""

    source: str
    start: int
    end: int
    first: str
    last: str

    @property
    def count(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True)
class GtidSet:
    flavor: Flavor
    sets: Mapping[str, Intervals]
    servers: Mapping[str, int] = field(default_factory=dict)
    """MariaDB only: the server id shown in a domain's GTIDs (that of the position's last GTID)."""

    def __sub__(self, other: GtidSet) -> GtidSet:
        if other.flavor != self.flavor:
            raise ValueError(f"cannot compare a {self.flavor} GTID set with a {other.flavor} one")
        sets = {}
        for source, intervals in self.sets.items():
            left = subtract_intervals(intervals, other.sets.get(source, ()))
            if left:
                sets[source] = left
        return GtidSet(self.flavor, sets, {s: v for s, v in self.servers.items() if s in sets})

    def __len__(self) -> int:
        return sum(size(i) for i in self.sets.values())

    def __bool__(self) -> bool:
        return any(self.sets.values())

    def gtid(self, source: str, number: int) -> str:
        if self.flavor == "mariadb":
            return f"{source}-{self.servers.get(source, 0)}-{number}"
        return f"{source}:{number}"

    def ranges(self) -> list[GtidRange]:
        return [
            GtidRange(source, start, end, self.gtid(source, start), self.gtid(source, end))
            for source, intervals in sorted(self.sets.items())
            for start, end in intervals
        ]

    def __str__(self) -> str:
        if self.flavor == "mariadb":
            return ",".join(self.gtid(d, iv[-1][1]) for d, iv in sorted(self.sets.items(), key=_domain_order) if iv)
        return ",".join(
            source + "".join(f":{s}" if s == e else f":{s}-{e}" for s, e in intervals)
            for source, intervals in sorted(self.sets.items())
            if intervals
        )


def _domain_order(item: tuple[str, Intervals]) -> int:
    return int(item[0])


def parse_mysql(text: str) -> GtidSet:
    """`@@gtid_executed` of MySQL 5.6+ (tagged GTIDs of 8.3+ included)."""
    sets: dict[str, list[tuple[int, int]]] = {}
    for part in "".join(text.split()).split(","):
        if not part:
            continue
        uuid, *items = part.split(":")
        if not _UUID.match(uuid):
            raise ParseError(f"GTID set {text!r}: {uuid!r} is not a server uuid")
        source = uuid.lower()
        if not items:
            raise ParseError(f"GTID set {text!r}: {uuid} has no transaction numbers")
        for item in items:
            m = _INTERVAL.match(item)
            if m is None:
                if not _TAG.match(item):
                    raise ParseError(f"GTID set {text!r}: {item!r} is neither an interval nor a tag")
                source = f"{uuid.lower()}:{item.lower()}"
                continue
            start, end = int(m.group(1)), int(m.group(2) or m.group(1))
            if start < 1 or end < start:
                raise ParseError(f"GTID set {text!r}: bad interval {item!r}")
            sets.setdefault(source, []).append((start, end))
    return GtidSet("mysql", {s: normalize(iv) for s, iv in sets.items()})


def parse_mariadb_list(text: str) -> list[tuple[int, int, int]]:
    """`0-1-102,1-2-5` as (domain, server, seq) triples, in the order given."""
    out = []
    for part in "".join(text.split()).split(","):
        if not part:
            continue
        m = _MARIADB_GTID.match(part)
        if m is None:
            raise ParseError(f"GTID list {text!r}: {part!r} is not domain-server-seq")
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    return out


def parse_mariadb(text: str) -> GtidSet:
    """A MariaDB position (`@@gtid_binlog_pos`, `@@gtid_slave_pos`, `@@gtid_current_pos`) as a set."""
    last: dict[str, tuple[int, int]] = {}
    for domain, server, seq in parse_mariadb_list(text):
        key = str(domain)
        if key not in last or seq > last[key][0]:
            last[key] = (seq, server)
    return GtidSet(
        "mariadb",
        {d: ((1, seq),) for d, (seq, _) in last.items() if seq > 0},
        {d: server for d, (_, server) in last.items()},
    )


def parse(flavor: Flavor, text: str) -> GtidSet:
    return parse_mariadb(text) if flavor == "mariadb" else parse_mysql(text)


def mariadb_errant(replica_state: str, master_state: str, replica_slave_pos: str, other_masters: str = "") -> GtidSet:
    """Transactions the replica binlogged under a (domain, server) its master never wrote so far.

    `replica_state`/`master_state` are `@@gtid_binlog_state`. For each (domain, server) entry of the
    replica whose seq is beyond what the master's state holds for that pair, the errant run starts
    after the highest seq the replica holds in that domain from servers the master knows (its
    replicated position), so an errant write that the master later "overtook" with the same seq
    (which strict mode refuses to apply) is still seen. When the replica has already applied seqs of
    the master beyond it, only that last errant GTID can be named (a lower bound on the count).

    `other_masters` is what the replica's other connections received (their `Gtid_IO_Pos`, multi-source
    replication): a domain this master never wrote, up to the seq another master sent in it, reached the
    replica's binlog by replication (`log_slave_updates`), not by a write there: it was reported errant.
    """
    master = {(d, s): q for d, s, q in parse_mariadb_list(master_state)}
    master_domains = {d for d, _ in master}
    received: dict[int, int] = {}
    for d, _s, q in parse_mariadb_list(other_masters):
        if d not in master_domains:
            received[d] = max(received.get(d, 0), q)
    known_servers = {(d, s) for d, s in master}
    replicated: dict[int, int] = {}
    for d, s, q in [*parse_mariadb_list(replica_slave_pos), *parse_mariadb_list(replica_state)]:
        if (d, s) in known_servers:
            replicated[d] = max(replicated.get(d, 0), min(q, master[(d, s)]))
    sets: dict[str, Intervals] = {}
    servers: dict[str, int] = {}
    for d, s, q in parse_mariadb_list(replica_state):
        if q <= master.get((d, s), 0) or q <= received.get(d, 0):
            continue
        # once the replica has applied the master's later seqs of the domain (no log_slave_updates: the
        # usual case), the run cannot be placed: the state keeps only each server's last GTID, which
        # is errant all the same (it was dropped here, and the errant write vanished from the audit)
        start = min(q, max(replicated.get(d, 0), received.get(d, 0), master.get((d, s), 0)) + 1)
        key = str(d)
        sets[key] = normalize([*sets.get(key, ()), (start, q)])
        servers[key] = s
    return GtidSet("mariadb", sets, servers)
