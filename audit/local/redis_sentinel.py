"""Start a real Redis Sentinel on loopback watching a master and its replica (`redis-server --sentinel`).

A sentinel needs a writable config file (it rewrites it with what it learns), so each one gets its own
directory. :func:`start_sentinel_group` returns once the sentinel knows the master and lists the replica
as connected, which takes about a second: the sentinel asks the master for INFO as soon as it connects.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from audit.local.redis_server import RedisServer, TlsFiles, free_port, wait_link_up


@dataclass
class SentinelServer:
    port: int
    workdir: Path
    monitors: dict[str, int] = field(default_factory=dict)
    """service name -> master port on 127.0.0.1"""
    proc: subprocess.Popen[bytes] | None = None
    tls: TlsFiles | None = None
    """TLS only, to its clients and to the servers it watches: `port` is the tls-port."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        tls = self.tls.client_options() if self.tls else {}
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=2, decode_responses=True, **tls)

    def _config(self) -> str:
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self.workdir}",
            "logfile sentinel.log",
            "daemonize no",
            "protected-mode no",
            *(f"{k} {v}" for k, v in (self.tls.config(self.port) if self.tls else [])),
        ]
        for service, master_port in self.monitors.items():
            lines += [
                f"sentinel monitor {service} 127.0.0.1 {master_port} 1",
                f"sentinel down-after-milliseconds {service} 5000",
                # long enough that the sentinel never "fixes" a replica a test re-pointed on purpose
                f"sentinel failover-timeout {service} 180000",
            ]
        return "\n".join(lines) + "\n"

    def start(self) -> SentinelServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found: run `make setup` (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "sentinel.conf"
        conf.write_text(self._config())
        self.proc = subprocess.Popen(
            [exe, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                self.client().ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sentinel on {self.port} exited; see {self.workdir}/sentinel.log") from None
                time.sleep(0.05)
        raise RuntimeError(f"sentinel on {self.port} did not start")

    def wait_replicas(self, service: str, count: int, timeout_s: float = 20) -> None:
        """Until the sentinel lists `count` connected replicas of `service`."""
        deadline = time.time() + timeout_s
        c = self.client()
        while time.time() < deadline:
            replicas = c.execute_command("SENTINEL", "REPLICAS", service)  # type: ignore[no-untyped-call]
            flags = [dict(zip(r[::2], r[1::2], strict=True)).get("flags", "") for r in replicas]
            if sum(1 for f in flags if "disconnected" not in f and "s_down" not in f) >= count:
                return
            time.sleep(0.1)
        raise RuntimeError(f"sentinel {self.port} does not list {count} replica(s) of {service}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class SentinelGroup:
    """A master, its replica and the sentinel(s) watching them under `service`."""

    master: RedisServer
    replica: RedisServer
    sentinels: list[SentinelServer]
    service: str

    @property
    def sentinel_addresses(self) -> list[str]:
        return [s.address for s in self.sentinels]

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        self.replica.stop()
        self.master.stop()


def start_sentinel_group(
    workdir: Path, *, service: str = "mymaster", sentinels: int = 1, tls: TlsFiles | None = None
) -> SentinelGroup:
    """A master, a replica and `sentinels` sentinels that all list the replica; with `tls`, every one of
    them TLS only (replication and the sentinels' links too)."""
    # a replica's first full sync otherwise waits 5 s for more replicas to share the transfer
    fast_sync = ["--repl-diskless-sync-delay", "0"]
    master = RedisServer(free_port(), workdir / "master", fast_sync, tls=tls).start()
    follow = ["--replicaof", "127.0.0.1", str(master.port)]
    replica = RedisServer(free_port(), workdir / "replica", follow, tls=tls)
    started: list[SentinelServer] = []
    try:
        replica.start()
        wait_link_up(replica)
        for i in range(sentinels):
            s = SentinelServer(free_port(), workdir / f"sentinel{i}", {service: master.port}, tls=tls).start()
            started.append(s)
        for s in started:
            s.wait_replicas(service, 1)
    except BaseException:
        for s in started:
            s.stop()
        replica.stop()
        master.stop()
        raise
    return SentinelGroup(master, replica, started, service)
