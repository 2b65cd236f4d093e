"""The pika kind's replication check: server versions, who the slave follows, per-DB state over two samples.

Without servers (a files-only audit of the binlogs) it is skipped, and so is the keyspace. The lag is
computed from both sides' per-DB `binlog_offset` (Pika's own `lag` counts what the master sent), with
the binlog file size that turns (filenum, offset) positions into bytes: the pair's `binlog.file_size`,
else the master's `CONFIG GET binlog-file-size`, else Pika's default.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import redis

from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.state import MetricValue, Offsets
from audit.sources.pika.info import PikaReplication, parse_pika_replication
from audit.sources.pika.model import PikaPair
from audit.sources.pika.replication import PikaSample, lag_total, pika_replication_findings, wrong_master
from audit.sources.redis.client import connected_sides, info_text
from audit.sources.redis.info import parse_info
from audit.sources.redis.replication import SAMPLE_GAP_S
from audit.sources.redis.replication_check import host_port, sleep_until
from audit.urls import shown_server_url

SIDES = ("master", "replica")
BINLOG_UNIT = "binlog position (bytes)"
PIKA_PORT = 9221
FILE_SIZE_METRIC = "binlog_file_size"
UNREAD_METRIC = "replication_dbs_unread"
DEFAULT_FILE_SIZE = 100 * 1024 * 1024
"""Pika's default `binlog-file-size`, when neither the pair, the server nor the files say."""


def read_replication(client: redis.Redis) -> tuple[PikaReplication, str]:
    raw = info_text(client, "replication").decode("utf-8", "replace")
    return parse_pika_replication(raw), raw


def configured_file_size(client: redis.Redis) -> int | None:
    """The server's binlog-file-size, or None if it will not say."""
    try:
        reply = client.execute_command("CONFIG", "GET", "binlog-file-size")
    except redis.RedisError:
        return None
    values = list(reply or [])
    try:
        return int(values[1]) if len(values) >= 2 and int(values[1]) > 0 else None
    except (TypeError, ValueError):
        return None


def sample_of(raw: dict[str, Any]) -> PikaSample:
    """A sample kept in the pair's state (raw INFO texts) parsed back."""
    return PikaSample(
        at_ms=raw["at_ms"],
        master=parse_pika_replication(raw["master"]),
        slave=parse_pika_replication(raw["replica"]),
        raw={"master": raw["master"], "replica": raw["replica"]},
    )


def offsets_of(samples: list[PikaSample], dbs: list[int], file_size: int) -> Offsets:
    """Per-DB binlog positions in bytes (filenum x file size + offset) at the last sample."""
    last = samples[-1]

    def pos(rep: PikaReplication, db: int) -> float | None:
        o = rep.binlog.get(db)
        return float(o.filenum * file_size + o.offset) if o is not None else None

    return Offsets(
        unit=BINLOG_UNIT,
        by_db={f"db{d}": {"master": pos(last.master, d), "replica": pos(last.slave, d)} for d in dbs},
    )


def _version(client: redis.Redis) -> str | None:
    """The server's version as its INFO server says it (Pika's, or a Redis-protocol server's)."""
    server = parse_info(info_text(client, "server"))
    version = server.get("pika_version") or server.get("redis_version")
    return str(version) if version is not None else None


class PikaReplicationCheck(Check):
    name = "replication"

    def __init__(self, pair: PikaPair) -> None:
        self.pair = pair

    def _clients(self, ctx: StageContext) -> AbstractContextManager[dict[str, redis.Redis]]:
        """Both sides' clients, closed when the `with` ends (not left to the garbage collector)."""
        return connected_sides({side: str(ctx.url(side)) for side in SIDES}, self.pair.name)

    def file_size(self, ctx: StageContext) -> int:
        if self.pair.binlog is not None and self.pair.binlog.file_size is not None:
            return self.pair.binlog.file_size
        configured = ctx.metrics.get(FILE_SIZE_METRIC)
        return int(configured) if configured else DEFAULT_FILE_SIZE

    def snapshot(self, ctx: StageContext) -> None:
        if not self.pair.has_servers:
            why = "no servers in the inventory: files-only audit of the binlogs"
            ctx.skip_check("keyspace", why)
            ctx.skip(why)
            return
        with self._clients(ctx) as clients:
            for side, client in clients.items():
                ctx.state.servers[side] = {"endpoint": shown_server_url(ctx.url(side)), "version": _version(client)}
            size = configured_file_size(clients["master"])
            if size is not None:
                ctx.metrics[FILE_SIZE_METRIC] = size
            ctx.state.dbs = self.pair.dbs or [0]
            if not self.pair.check_replication:
                ctx.skip("check_replication: false")
                return
            slave, _ = read_replication(clients["replica"])
        found = wrong_master(slave, *host_port(str(ctx.url("master")), PIKA_PORT))
        if found is not None:
            ctx.add_findings([found])
            why = f"the slave does not follow this pair's master ({json.dumps(found.evidence, sort_keys=True)})"
            ctx.skip_check("keyspace", why)
            ctx.skip(why)

    def _sample(self, ctx: StageContext) -> dict[str, Any]:
        with self._clients(ctx) as clients:
            s_raw = read_replication(clients["replica"])[1]
            m_raw = read_replication(clients["master"])[1]
        return {"at_ms": int(time.time() * 1000), "master": m_raw, "replica": s_raw}

    def diff(self, ctx: StageContext) -> None:
        ctx.data["first_sample"] = self._sample(ctx)

    def recheck(self, ctx: StageContext) -> None:
        first = ctx.data["first_sample"]
        sleep_until(first["at_ms"], SAMPLE_GAP_S)
        raw_samples = [first, self._sample(ctx)]
        samples = [sample_of(r) for r in raw_samples]
        dbs = ctx.state.dbs or [0]
        size = self.file_size(ctx)
        slave_port = host_port(str(ctx.url("replica")), PIKA_PORT)[1]
        ctx.add_findings(pika_replication_findings(samples, dbs, slave_port, size, self.pair.gate.max_lag_bytes))
        ctx.metrics["lag_bytes"] = lag_total(samples[-1], dbs, size)
        ctx.state.replication_samples = raw_samples
        ctx.state.offsets = offsets_of(samples, dbs, size)
        last = samples[-1]
        unread = [d for d in dbs if last.master.binlog.get(d) is None or last.slave.binlog.get(d) is None]
        ctx.metrics[UNREAD_METRIC] = len(unread)
        ctx.done(f"{len(samples)} INFO samples, dbs {dbs}" + (f"; no binlog_offset for dbs {unread}" if unread else ""))

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        n = int(metrics.get(UNREAD_METRIC) or 0)
        why = "no binlog_offset in a side's INFO replication: not a Pika server, or the DB is not there"
        return [Uncovered(n, f"{n} DBs whose replication state could not be read ({why})")]
