"""Read keys of a Redis Cluster by slot, following MOVED and ASK (resharding during the audit).

A key's slot is CRC16-XMODEM of the key (or of its `{hash tag}`: the bytes between the first `{` and
the next `}`, when not empty) mod 16384. :class:`ClusterKeyReader` sends each key to the node that
owns its slot, reads it with the snapshot's :class:`~audit.sources.redis.keys.KeyReader`, and re-reads
the keys a node redirected:

- `MOVED <slot> <host:port>`: the slot has a new owner; the map is updated and the key read there;
- `ASK <slot> <host:port>`: the slot is being migrated and this key is already on the target; it is read
  there on a connection that sends `ASKING` before every command (so a key of a migrating slot is read
  on both nodes and never reported missing because it sat on the other one).

A key still redirected after `max_redirects` hops keeps the error (status error: unreadable, counted as
uncovered); a CLUSTERDOWN reply likewise. Neither raises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import hiredis

from audit.sources.redis.client import open_pipe
from audit.sources.redis.endpoints import node_url
from audit.sources.redis.keys import ERROR, KeyReader, KeyState
from audit.sources.redis.resp import Command, RespPipe, pack
from audit.sources.redis.topology import SLOTS, NodeLine, Topology, parse_cluster_nodes


def _crc16_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_TABLE = _crc16_table()


def crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _TABLE[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key: bytes) -> int:
    """The cluster slot of `key` (what CLUSTER KEYSLOT answers)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return crc16(key) % SLOTS


def parse_redirect(error: str | None) -> tuple[str, int, str] | None:
    """`MOVED 3999 127.0.0.1:6381` -> ("MOVED", 3999, "127.0.0.1:6381"); None for any other error."""
    if not error:
        return None
    parts = error.split()
    if len(parts) == 3 and parts[0] in ("MOVED", "ASK") and parts[1].isdigit():
        return parts[0], int(parts[1]), parts[2]
    return None


def _myself(nodes_text: str) -> NodeLine | None:
    """The node that answered `CLUSTER NODES` (its `myself` line)."""
    return next((n for n in parse_cluster_nodes(nodes_text, "") if "myself" in n.flags), None)


def served_slots(nodes_text: str) -> set[int] | None:
    """The slots the node that answered `CLUSTER NODES` (its `myself` line) owns, those it is migrating
    away included: it still answers for their keys (a key it holds with its value, any other with ASK,
    which :class:`AskAbsentReader` reads as absent). None when that node is no master (a failover: said
    elsewhere)."""
    me = _myself(nodes_text)
    if me is None or not me.is_master:
        return None
    return {n for a, b in me.slots for n in range(a, b + 1)}


class AskAbsentReader(KeyReader):
    """A shard master's reads in a replication audit, where its ASK for a key means the key is not there.

    Redis answers ASK only from the node migrating the key's slot, and only for a key it does not hold
    (one it holds is served; redis 7.0, any single-key command: EXISTS, TYPE, PTTL, GET...): the master
    does not hold the key, exactly as TYPE `none` says elsewhere. Its replica (READONLY) is not told
    the slot is migrating: it answers from what it holds, so a key only the replica holds reads present
    there and is compared (extra_on_replica), while a key MIGRATE moved away, its DEL replicated, reads
    absent on both once the replica has applied the master's position (the recheck waits for it).

    Only for a replication audit: a migration reads each key where the cluster serves it, ASK followed
    (:class:`ClusterKeyReader`)."""

    def read(self, keys: Sequence[bytes]) -> list[KeyState]:
        return [_absent_if_asked(s) for s in super().read(keys)]


def _absent_if_asked(state: KeyState) -> KeyState:
    redirect = parse_redirect(state.error) if state.status == ERROR else None
    if redirect is None or redirect[0] != "ASK":
        return state  # MOVED: the slot has left the shard (left out by the caller), never "absent"
    return KeyState.vanished(state.key, state.read_at_ms)


def split_packed(payload: bytes) -> list[list[bytes]]:
    """Packed RESP commands back into their words (a request is an array of bulk strings, which
    hiredis' reply parser reads like any array)."""
    reader = hiredis.Reader()
    reader.feed(payload)
    out: list[list[bytes]] = []
    while (command := reader.gets()) is not False:
        out.append(command)
    return out


class _AskingPipe:
    """A pipe that precedes every command with ASKING (valid for one command) and drops its replies.

    It offers what :class:`~audit.sources.redis.keys.KeyReader` uses of a RespPipe (send_packed,
    send_parts, recv, call, execute): packed requests are split into their commands, each re-packed
    after an ASKING. Only keys of a slot being migrated come this way: few, so the re-packing is cheap.
    """

    def __init__(self, pipe: RespPipe) -> None:
        self.pipe = pipe

    @property
    def commands_sent(self) -> int:
        return self.pipe.commands_sent

    @property
    def wait_s(self) -> float:
        return self.pipe.wait_s

    def send_packed(self, payload: bytes, n_replies: int) -> int:
        commands = split_packed(payload) if n_replies else []
        return self.pipe.send_packed(pack([c for cmd in commands for c in ((b"ASKING",), cmd)]), 2 * len(commands))

    def send_parts(self, parts: Sequence[tuple[bytes, int]]) -> list[int]:
        return [self.send_packed(payload, n) for payload, n in parts]

    def send(self, commands: Sequence[Command]) -> int:
        return self.send_packed(pack(commands) if commands else b"", len(commands))

    def recv(self, ticket: int) -> list[Any]:
        return self.pipe.recv(ticket)[1::2]

    def call(self, command: Command) -> Any:
        return self.recv(self.send([command]))[0]

    def execute(self, commands: Sequence[Command]) -> list[Any]:
        return self.recv(self.send(commands)) if commands else []


class ClusterKeyReader:
    """`read(keys)` like KeyReader's, for keys spread over a cluster's shards (db 0)."""

    def __init__(
        self,
        topology: Topology,
        *,
        page: int,
        window_bytes: int,
        replicas: bool = False,
        shard_as_db: bool = False,
        max_redirects: int = 5,
    ) -> None:
        """`replicas`: read from each shard's first replica (READONLY) instead of its master.
        `shard_as_db`: :meth:`read_db`'s db is the shard's ordinal in the topology."""
        self._seed_url = topology.shards[0].master.url if topology.shards else ""
        self._owner: list[str | None] = [None] * SLOTS
        self._urls: dict[str, str] = {}
        self._shard_nodes: list[str] = []
        for shard in topology.shards:
            node = shard.replicas[0] if replicas and shard.replicas else shard.master
            self._urls[node.addr] = node.url
            if shard_as_db:
                self._shard_nodes.append(node.addr)
            for a, b in shard.slots:
                self._owner[a : b + 1] = [node.addr] * (b - a + 1)
        self._page, self._window = page, window_bytes
        self._readonly = replicas
        self._max_redirects = max_redirects
        self._pipes: dict[str, RespPipe] = {}
        self.redirects = {"MOVED": 0, "ASK": 0}

    def _pipe(self, addr: str) -> RespPipe:
        if addr not in self._pipes:
            host, _, port = addr.rpartition(":")
            url = self._urls.get(addr) or node_url(self._seed_url, host.strip("[]"), int(port))
            self._pipes[addr] = open_pipe(url, role="cluster node", readonly=self._readonly)  # no pacing: few keys
        return self._pipes[addr]

    def owner(self, key: bytes) -> str | None:
        return self._owner[key_slot(key)]

    def pipe_for(self, key: bytes) -> RespPipe:
        """The pipe to the node serving `key`'s slot (for field-level reads of one key)."""
        addr = self.owner(key)
        if addr is None:
            raise ValueError(f"slot {key_slot(key)} has no owner")
        return self._pipe(addr)

    def read_db(self, db: int, keys: Sequence[bytes]) -> list[KeyState]:
        """The recheck's entry point (`audit.sources.redis.recheck.read_keys`). With `shard_as_db` the db
        is a shard ordinal (fleet_snapshot's `shard_as_db`): keys are read on that shard's node first;
        otherwise a cluster has db 0 only."""
        if self._shard_nodes:
            if not 0 <= db < len(self._shard_nodes):
                raise ValueError(f"db {db} is no shard ordinal (0..{len(self._shard_nodes) - 1})")
            return self.read(keys, start_at=self._shard_nodes[db])
        if db != 0:
            raise ValueError(f"a cluster has db 0 only (asked for db {db})")
        return self.read(keys)

    def read(self, keys: Sequence[bytes], start_at: str | None = None) -> list[KeyState]:
        """Each key's state, read on its slot's owner (or first on `start_at`), redirects followed."""
        out: list[KeyState] = []
        pending: dict[tuple[str, bool], list[bytes]] = defaultdict(list)
        for k in keys:
            addr = start_at or self.owner(k)
            if addr is None:
                out.append(KeyState(k, "", None, None, 0, None, ERROR, f"slot {key_slot(k)} has no owner", 0))
            else:
                pending[(addr, False)].append(k)
        for _ in range(self._max_redirects + 1):
            if not pending:
                break
            nxt: dict[tuple[str, bool], list[bytes]] = defaultdict(list)
            for (addr, asking), batch in pending.items():
                for state in self._read_on(addr, asking, batch):
                    redirect = parse_redirect(state.error) if state.status == ERROR else None
                    if redirect is None:
                        out.append(state)
                        continue
                    kind, slot, target = redirect
                    self.redirects[kind] += 1
                    if kind == "MOVED":
                        self._owner[slot] = target
                    nxt[(target, kind == "ASK")].append(state.key)
            pending = nxt
        for (_, _), batch in pending.items():  # still redirected after max_redirects hops
            out += [KeyState(k, "", None, None, 0, None, ERROR, "too many cluster redirects", 0) for k in batch]
        return out

    def _read_on(self, addr: str, asking: bool, keys: list[bytes]) -> list[KeyState]:
        pipe = self._pipe(addr)
        reader = KeyReader(_AskingPipe(pipe) if asking else pipe, self._page, self._window)  # type: ignore[arg-type]
        return reader.read(keys)

    def close(self) -> None:
        for p in self._pipes.values():
            p.close()
        self._pipes.clear()
