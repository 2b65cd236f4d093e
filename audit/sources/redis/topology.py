"""Discover what a Redis endpoint stands for: shards, each a master with its replicas and slot ranges.

- **standalone**: one shard, the server itself; its replicas as its `INFO replication` lists them.
- **cluster**: from any node, `CLUSTER SHARDS` (Redis 7.0+), else `CLUSTER SLOTS` plus `CLUSTER NODES`
  for masters that own no slot. Every master is then asked for its own `CLUSTER NODES` line, the only
  place a node shows the slots it is migrating (`[slot->-peer]`) or importing (`[slot-<-peer]`).
  Slots nobody owns are `uncovered`; `CLUSTER INFO`'s `cluster_state` is kept.
- **sentinel**: each sentinel in turn, `SENTINEL GET-MASTER-ADDR-BY-NAME` and `SENTINEL REPLICAS`.

Discovery only reads. A node that cannot be reached after the seed answered is recorded in
``Topology.unreachable`` (its shard cannot be audited; the caller says so and exits 3 after auditing
the others); the seed itself, or every sentinel, being unreachable raises SourceConnectError. A
`topology: cluster` endpoint on a server without cluster mode raises ConfigError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from hiredis import ReplyError

from audit.errors import ConfigError, SourceConnectError
from audit.sources.redis.client import connect, host_port, info_text
from audit.sources.redis.endpoints import NodeEndpoint, RedisEndpoint, SentinelEndpoint, node_url
from audit.sources.redis.info import parse_info, replicas_listed
from audit.sources.redis.resp import RespPipe
from audit.urls import ConnResolver, redact_url

SLOTS = 16384
CLUSTER_ACL = "+cluster|shards +cluster|slots +cluster|nodes +cluster|info +readonly +asking"
"""What a cluster audit sends beyond a standalone audit's commands (README: the ACL line)."""
SlotRange = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Node:
    """One server. `url` carries the credentials: for connecting only (it is left out of the repr)."""

    host: str
    port: int
    url: str = field(repr=False)
    node_id: str | None = None
    health: str | None = None
    """cluster: online | failed | loading (CLUSTER SHARDS) or the CLUSTER NODES flags; sentinel: flags."""

    @property
    def addr(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Shard:
    master: Node
    replicas: tuple[Node, ...] = ()
    slots: tuple[SlotRange, ...] = ()

    @property
    def name(self) -> str:
        """The shard's name in findings (`detail.shard`): its master's address."""
        return self.master.addr

    @property
    def slot_count(self) -> int:
        return sum(b - a + 1 for a, b in self.slots)


@dataclass(frozen=True, slots=True)
class SlotMove:
    """A slot a master is migrating to, or importing from, another node (resharding in progress)."""

    slot: int
    state: str  # migrating | importing
    node: str  # the address of the node in that state
    peer: str  # the other node's address (or its id when unknown)


@dataclass(frozen=True)
class Topology:
    kind: str  # standalone | cluster | sentinel
    seed: str  # the endpoint as it may be shown (redacted)
    shards: tuple[Shard, ...]
    source: str = ""  # which command the shards came from
    cluster_state: str | None = None
    uncovered: tuple[SlotRange, ...] = ()
    moves: tuple[SlotMove, ...] = ()
    service: str | None = None
    unreachable: dict[str, str] = field(default_factory=dict)
    """address -> why it could not be reached during discovery"""

    @property
    def nodes(self) -> list[Node]:
        return [n for s in self.shards for n in (s.master, *s.replicas)]

    def shard_of(self, addr: str) -> Shard | None:
        return next((s for s in self.shards if addr in {n.addr for n in (s.master, *s.replicas)}), None)


# --- pure parsers of the cluster commands' replies (RESP2, bytes as hiredis returns them) ---------------


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    return {_s(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


@dataclass(frozen=True, slots=True)
class RawNode:
    node_id: str
    host: str
    port: int
    role: str  # master | replica
    health: str
    master_id: str | None = None


@dataclass(frozen=True, slots=True)
class RawShard:
    slots: tuple[SlotRange, ...]
    nodes: tuple[RawNode, ...]


def _host(endpoint: str, ip: str, fallback: str) -> str:
    """A node's address: its preferred endpoint, else its IP; '?' or '' mean the node does not know it."""
    for h in (endpoint, ip):
        if h and h != "?":
            return h
    return fallback


def _client_port(node: dict[str, Any], tls: bool) -> int:
    """The port a client reaches the node on: `tls-port` for a TLS client when the node lists one (a
    cluster with tls-cluster yes lists its plain `port` too, or only `tls-port` when it has none)."""
    order = ("tls-port", "port") if tls else ("port", "tls-port")
    return int(next(node[k] for k in order if k in node))


def parse_cluster_shards(reply: Sequence[Any], fallback_host: str, tls: bool = False) -> list[RawShard]:
    """CLUSTER SHARDS: per shard `slots` (flat start,end pairs) and `nodes` (flat field/value maps).
    `tls`: the auditor speaks TLS (rediss://), so each node's `tls-port` is the one to use."""
    out = []
    for entry in reply:
        d = _pairs(entry)
        flat = [int(x) for x in d.get("slots", [])]
        slots = tuple((flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2))
        nodes = []
        for raw in d.get("nodes", []):
            n = _pairs(raw)
            host = _host(_s(n.get("endpoint", "")), _s(n.get("ip", "")), fallback_host)
            nodes.append(RawNode(_s(n["id"]), host, _client_port(n, tls), _s(n["role"]), _s(n.get("health", ""))))
        out.append(RawShard(slots, tuple(nodes)))
    return out


def parse_cluster_slots(reply: Sequence[Any], fallback_host: str) -> list[RawShard]:
    """CLUSTER SLOTS: `[start, end, [ip, port, id, ...], replica, ...]` per range, grouped by master id."""
    by_master: dict[str, tuple[list[SlotRange], list[RawNode]]] = {}
    for entry in reply:
        start, end, master, *replicas = entry
        m = RawNode(_s(master[2]), _host(_s(master[0]), "", fallback_host), int(master[1]), "master", "")
        ranges, nodes = by_master.setdefault(m.node_id, ([], [m]))
        ranges.append((int(start), int(end)))
        for r in replicas:
            node = RawNode(_s(r[2]), _host(_s(r[0]), "", fallback_host), int(r[1]), "replica", "", m.node_id)
            if all(n.node_id != node.node_id for n in nodes):
                nodes.append(node)
    return [RawShard(tuple(sorted(ranges)), tuple(nodes)) for ranges, nodes in by_master.values()]


@dataclass(frozen=True, slots=True)
class NodeLine:
    """One line of CLUSTER NODES."""

    node_id: str
    host: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[SlotRange, ...]
    migrating: dict[int, str]  # slot -> peer id
    importing: dict[int, str]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags


def parse_cluster_nodes(text: str, fallback_host: str) -> list[NodeLine]:
    """`<id> <ip:port@cport[,hostname]> <flags> <master|-> <ping> <pong> <epoch> <link> <slot>...`."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        addr = parts[1].split(",")[0].split("@")[0]
        ip, _, port = addr.rpartition(":")
        slots: list[SlotRange] = []
        migrating: dict[int, str] = {}
        importing: dict[int, str] = {}
        for item in parts[8:]:
            if item.startswith("["):
                body = item.strip("[]")
                if "->-" in body:
                    slot, peer = body.split("->-")
                    migrating[int(slot)] = peer
                elif "-<-" in body:
                    slot, peer = body.split("-<-")
                    importing[int(slot)] = peer
                continue
            a, _, b = item.partition("-")
            slots.append((int(a), int(b or a)))
        out.append(
            NodeLine(
                node_id=parts[0],
                host=_host(ip.strip("[]"), "", fallback_host),
                port=int(port or 0),
                flags=frozenset(parts[2].split(",")),
                master_id=None if parts[3] == "-" else parts[3],
                slots=tuple(slots),
                migrating=migrating,
                importing=importing,
            )
        )
    return out


def shards_from_nodes(lines: Sequence[NodeLine]) -> list[RawShard]:
    """Shards as CLUSTER NODES shows them (used for masters CLUSTER SLOTS leaves out: those without slots)."""
    out = []
    for m in (n for n in lines if n.is_master and "noaddr" not in n.flags):
        health = "failed" if {"fail", "fail?"} & m.flags else "online"
        nodes = [RawNode(m.node_id, m.host, m.port, "master", health)]
        nodes += [
            RawNode(r.node_id, r.host, r.port, "replica", "failed" if {"fail", "fail?"} & r.flags else "online")
            for r in lines
            if r.master_id == m.node_id and not r.is_master
        ]
        out.append(RawShard(tuple(sorted(m.slots)), tuple(nodes)))
    return out


def with_replicas_from_nodes(shards: Sequence[RawShard], lines: Sequence[NodeLine]) -> list[RawShard]:
    """CLUSTER SLOTS shards completed from CLUSTER NODES: CLUSTER SLOTS leaves out masters without slots
    and replicas that have not received data yet (replication offset 0) or are failing."""
    from_nodes = {s.nodes[0].node_id: s for s in shards_from_nodes(lines)}
    out = []
    for s in shards:
        master = s.nodes[0]
        listed = {n.node_id for n in s.nodes}
        extra = [n for n in from_nodes.get(master.node_id, RawShard((), ())).nodes[1:] if n.node_id not in listed]
        out.append(RawShard(s.slots, (*s.nodes, *extra)))
    masters = {s.nodes[0].node_id for s in shards}
    out += [s for node_id, s in from_nodes.items() if node_id not in masters and not s.slots]
    return out


def uncovered_slots(ranges: Sequence[SlotRange]) -> list[SlotRange]:
    """The slot ranges of 0..16383 that no range covers."""
    out, nxt = [], 0
    for a, b in sorted(ranges):
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = max(nxt, b + 1)
    if nxt < SLOTS:
        out.append((nxt, SLOTS - 1))
    return out


# --- discovery -------------------------------------------------------------------------------------------


def discover(endpoint: RedisEndpoint, resolver: ConnResolver | None = None, *, role: str = "") -> Topology:
    """The shards behind `endpoint`. `role` prefixes error messages (e.g. ``pair sessions master``)."""
    if isinstance(endpoint, SentinelEndpoint):
        return discover_sentinel(endpoint, role=role)
    url = endpoint.resolve(resolver)
    if endpoint.topology == "cluster":
        return discover_cluster(url, role=role)
    return discover_standalone(url, role=role)


def _raw(client: redis.Redis, *command: bytes) -> Any:
    """One command's raw reply (hiredis: bytes, lists, ReplyError values), free of redis-py callbacks."""
    pipe = RespPipe(client)
    try:
        return pipe.execute([command])[0]
    finally:
        pipe.close()


def _asked(client: redis.Redis, url: str, label: str, *command: bytes) -> Any:
    """A reply discovery cannot do without: an error reply (an ACL's NOPERM, ...) is a SourceConnectError
    naming the node and the command, never a reply parsed as if it were the data."""
    reply = _raw(client, *command)
    if isinstance(reply, ReplyError):
        where = host_port(url)
        said = " ".join(c.decode() for c in command)
        hint = f" (a cluster audit's ACL user also needs {CLUSTER_ACL})" if "NOPERM" in str(reply) else ""
        raise SourceConnectError(f"{label} {where} refused {said}: {reply}{hint}", where=where)
    return reply


def discover_standalone(url: str, *, role: str = "") -> Topology:
    """A plain URL's server; a cluster node or a sentinel named by a plain URL is a ConfigError (read alone,
    a cluster node holds one shard's keys, a sentinel none: every other key would look extra or missing)."""
    from audit.sources.redis.replication_check import standalone_only

    with connect(url, role=role or "standalone") as client:
        mode = parse_info(info_text(client, "server")).get("redis_mode")
        standalone_only(role or "standalone", redact_url(url), str(mode or ""))
        info = parse_info(info_text(client, "replication"))
    host, _, port = host_port(url).rpartition(":")
    replicas = tuple(
        Node(str(e["ip"]), int(e["port"]), node_url(url, str(e["ip"]), int(e["port"])), health=str(e.get("state")))
        for e in replicas_listed(info)
        if isinstance(e.get("port"), int) and e["port"] > 0
    )
    master = Node(host, int(port), url)
    return Topology("standalone", redact_url(url), (Shard(master, replicas, ((0, SLOTS - 1),)),), source="INFO")


def discover_cluster(url: str, *, role: str = "", use_shards: bool = True) -> Topology:
    """`use_shards=False` goes straight to the CLUSTER SLOTS path (what a server before 7.0 gets)."""
    label = role or "cluster"
    fallback = host_port(url).rpartition(":")[0]
    with connect(url, role=label) as seed:
        cluster_info = parse_info(info_text(seed, "cluster"))
        if str(cluster_info.get("cluster_enabled", "0")) != "1":
            raise ConfigError(
                f"{label} {redact_url(url)}: topology: cluster, but the server is not in cluster mode "
                "(INFO cluster: cluster_enabled:0); use topology: standalone"
            )
        reply = _raw(seed, b"CLUSTER", b"SHARDS") if use_shards else ReplyError("not asked")
        if isinstance(reply, ReplyError):  # before 7.0 (or an ACL allowing CLUSTER SLOTS only)
            source = "CLUSTER SLOTS"
            nodes_text = _s(_asked(seed, url, label, b"CLUSTER", b"NODES"))
            slots = _asked(seed, url, label, b"CLUSTER", b"SLOTS")
            from_nodes = parse_cluster_nodes(nodes_text, fallback)
            raw = with_replicas_from_nodes(parse_cluster_slots(slots, fallback), from_nodes)
        else:
            source = "CLUSTER SHARDS"
            raw = parse_cluster_shards(reply, fallback, tls=url.startswith("rediss:"))
        state = _s(_asked(seed, url, label, b"CLUSTER", b"INFO"))
    cluster_state = parse_info(state).get("cluster_state")
    shards = [s for s in (_shard(r, url) for r in raw) if s is not None]
    moves, unreachable = _moves(shards, fallback, label)
    covered = [r for s in shards for r in s.slots]
    return Topology(
        "cluster",
        redact_url(url),
        tuple(sorted(shards, key=lambda s: (s.slots[:1] or [(SLOTS, SLOTS)])[0])),
        source=source,
        cluster_state=str(cluster_state) if cluster_state is not None else None,
        uncovered=tuple(uncovered_slots(covered)),
        moves=tuple(moves),
        unreachable=unreachable,
    )


def _shard(raw: RawShard, seed_url: str) -> Shard | None:
    def node(n: RawNode) -> Node:
        return Node(n.host, n.port, node_url(seed_url, n.host, n.port), n.node_id, n.health or None)

    masters = [n for n in raw.nodes if n.role == "master"]
    if not masters:  # a shard whose master was removed: its replicas have nobody to be compared with
        return None
    return Shard(node(masters[0]), tuple(node(n) for n in raw.nodes if n.role != "master"), raw.slots)


def _moves(shards: Sequence[Shard], fallback: str, label: str) -> tuple[list[SlotMove], dict[str, str]]:
    """Each master's own view of the slots it migrates or imports; masters that do not answer."""
    moves: list[SlotMove] = []
    unreachable: dict[str, str] = {}
    by_id = {n.node_id: n.addr for s in shards for n in (s.master, *s.replicas) if n.node_id}
    for shard in shards:
        m = shard.master
        try:
            with connect(m.url, role=f"{label} shard master") as client:
                text = _s(_asked(client, m.url, f"{label} shard master", b"CLUSTER", b"NODES"))
        except (SourceConnectError, redis.RedisError, OSError) as e:
            unreachable[m.addr] = str(e)
            continue
        me = next((n for n in parse_cluster_nodes(text, fallback) if "myself" in n.flags), None)
        if me is None:
            continue
        for slot, peer in sorted(me.migrating.items()):
            moves.append(SlotMove(slot, "migrating", m.addr, by_id.get(peer, peer)))
        for slot, peer in sorted(me.importing.items()):
            moves.append(SlotMove(slot, "importing", m.addr, by_id.get(peer, peer)))
    return moves, unreachable


def discover_sentinel(endpoint: SentinelEndpoint, *, role: str = "") -> Topology:
    """Ask each sentinel in turn; the first that knows the service answers for the group."""
    label = role or "sentinel"
    endpoint.check_tls_files(label)
    problems: list[str] = []
    unknown: list[str] = []
    for url in endpoint.sentinel_urls():
        where = host_port(url)
        try:
            with connect(url, role=f"{label} sentinel") as client:
                service = endpoint.service.encode()
                addr = _raw(client, b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", service)
                if isinstance(addr, ReplyError):  # not a sentinel, or an ACL/auth refusal: its own words say which
                    problems.append(f"sentinel {where} refused SENTINEL GET-MASTER-ADDR-BY-NAME: {addr}")
                    continue
                if addr is None:
                    unknown.append(where)
                    continue
                replicas = _raw(client, b"SENTINEL", b"REPLICAS", service)
                if isinstance(replicas, ReplyError):  # before Redis 5: SENTINEL SLAVES
                    replicas = _raw(client, b"SENTINEL", b"SLAVES", service)
        except SourceConnectError as e:
            problems.append(str(e))
            continue
        except (redis.RedisError, OSError) as e:
            problems.append(f"sentinel {where}: {e}")
            continue
        if isinstance(replicas, ReplyError):
            problems.append(f"sentinel {where} refused SENTINEL REPLICAS: {replicas}")
            continue
        host, port = _s(addr[0]), int(addr[1])
        master = Node(host, port, endpoint.node_url(host, port))
        nodes = []
        for r in replicas:
            d = {k: _s(v) for k, v in _pairs(r).items()}
            nodes.append(
                Node(d["ip"], int(d["port"]), endpoint.node_url(d["ip"], int(d["port"])), health=d.get("flags"))
            )
        shard = Shard(master, tuple(nodes), ((0, SLOTS - 1),))
        seed = f"sentinel {where} service {endpoint.service}"
        return Topology("sentinel", seed, (shard,), source="SENTINEL", service=endpoint.service)
    if unknown:
        raise SourceConnectError(
            f"{label}: sentinel(s) {', '.join(unknown)} do not know service {endpoint.service!r}"
            + (f"; {'; '.join(problems)}" if problems else ""),
            where=unknown[0],
        )
    first = host_port(endpoint.sentinel_urls()[0])
    raise SourceConnectError(
        f"{label}: no sentinel answered for service {endpoint.service!r}: {'; '.join(problems)}", where=first
    )


def describe(topology: Topology) -> dict[str, Any]:
    """What the summary may show about a topology (addresses only, no credentials)."""
    return {
        "kind": topology.kind,
        "seed": topology.seed,
        "source": topology.source,
        "cluster_state": topology.cluster_state,
        "service": topology.service,
        "shards": [
            {
                "shard": s.name,
                "master_id": s.master.node_id,
                "replicas": [r.addr for r in s.replicas],
                "slots": [list(r) for r in s.slots],
                "slot_count": s.slot_count,
            }
            for s in topology.shards
        ],
        "uncovered": [list(r) for r in topology.uncovered],
        "moves": [{"slot": m.slot, "state": m.state, "node": m.node, "peer": m.peer} for m in topology.moves],
        "unreachable": sorted(topology.unreachable),
    }


__all__ = [
    "Node",
    "NodeEndpoint",
    "Shard",
    "SlotMove",
    "Topology",
    "describe",
    "discover",
    "parse_cluster_nodes",
    "parse_cluster_shards",
    "parse_cluster_slots",
    "uncovered_slots",
]
