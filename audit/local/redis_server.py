"""Start real `redis-server` processes on loopback: a master and a replica with `replicaof`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class TlsFiles:
    """A TLS-only server's files (its plain port closed: `port 0`, `tls-port` its only port), and the
    client certificate this module's own clients present when `auth_clients` asks for one."""

    cert: Path
    key: Path
    ca: Path
    client_cert: Path | None = None
    client_key: Path | None = None
    auth_clients: bool = False

    def config(self, port: int) -> list[tuple[str, str]]:
        """(directive, value): replication and a sentinel's links to its servers run TLS too."""
        return [
            ("port", "0"),
            ("tls-port", str(port)),
            ("tls-cert-file", str(self.cert)),
            ("tls-key-file", str(self.key)),
            ("tls-ca-cert-file", str(self.ca)),
            ("tls-replication", "yes"),
            ("tls-auth-clients", "yes" if self.auth_clients else "no"),
        ]

    def client_options(self) -> dict[str, Any]:
        cert = {"ssl_certfile": str(self.client_cert), "ssl_keyfile": str(self.client_key)} if self.client_cert else {}
        return {"ssl": True, "ssl_ca_certs": str(self.ca), **cert}


@dataclass
class RedisServer:
    port: int
    workdir: Path
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    tls: TlsFiles | None = None
    """TLS only: `port` is the tls-port, and the plain port is closed."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self, db: int = 0) -> redis.Redis:
        tls = self.tls.client_options() if self.tls else {}
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, protocol=2, **tls)

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found: run `make setup` (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            exe,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            "redis.log",
            "--protected-mode",
            "no",
            *(arg for k, v in (self.tls.config(self.port) if self.tls else []) for arg in (f"--{k}", v)),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                self.client().ping()
                return self
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on {self.port} exited; see {self.workdir}/redis.log") from None
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_pair(
    workdir: Path,
    master_port: int | None = None,
    replica_port: int | None = None,
    replica_extra: list[str] | None = None,
) -> tuple[RedisServer, RedisServer]:
    """A master and a replica following it, returned once the replica's link is up."""
    master = RedisServer(master_port or free_port(), workdir / "master").start()
    replica = RedisServer(
        replica_port or free_port(),
        workdir / "replica",
        ["--replicaof", "127.0.0.1", str(master.port), *(replica_extra or [])],
    ).start()
    wait_link_up(replica)
    return master, replica


def _wait_until(ready: Callable[[], bool], timeout_s: float, failure: str) -> None:
    """Poll `ready` every 50 ms until it holds; RuntimeError(`failure`) after `timeout_s`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(failure)


def wait_link_up(replica: RedisServer, timeout_s: float = 20) -> None:
    c = replica.client()
    _wait_until(
        lambda: c.info("replication").get("master_link_status") == "up",
        timeout_s,
        f"replica on {replica.port} did not connect to its master",
    )


def wait_acked(master: RedisServer, replica: RedisServer, timeout_s: float = 30) -> None:
    """Until the master lists `replica` as having acknowledged everything written so far.

    A replica acknowledges once a second: until then the master shows an older offset (0 right after a
    sync), which an audit reports as `lag_metric_unreliable`.
    """
    c = master.client()
    target = int(c.info("replication")["master_repl_offset"])

    def acked() -> bool:
        listed = [v for k, v in c.info("replication").items() if k.startswith("slave") and isinstance(v, dict)]
        return any(e.get("port") == replica.port and int(e.get("offset", -1)) >= target for e in listed)

    _wait_until(acked, timeout_s, f"replica on {replica.port} did not acknowledge its master's offset {target}")


def wait_in_sync(master: RedisServer, replica: RedisServer, timeout_s: float = 30) -> None:
    """Until the replica has processed everything the master has written so far."""
    target = int(master.client().info("replication")["master_repl_offset"])
    c = replica.client()
    _wait_until(
        lambda: int(c.info("replication").get("slave_repl_offset", -1)) >= target,
        timeout_s,
        "replica did not catch up with its master",
    )
