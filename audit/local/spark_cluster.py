"""A Spark standalone cluster on loopback: a Master and a Worker JVM from the Spark inside the pyspark package.

    cluster = StandaloneCluster(Path("/tmp/spark")).start()    # master on 127.0.0.1, free ports
    cluster.master_url                                         # spark://127.0.0.1:PORT
    ...
    cluster.stop()

For tests and benches: the jobs then run as on a real cluster (executors in their own JVMs, Python
workers started by them), without installing Spark. Both daemons run in one new process group, which
`stop()` ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.diff.connect_server import spark_home
from audit.local.redis_server import free_port

STARTUP_S = 120.0


@dataclass
class StandaloneCluster:
    workdir: Path
    cores: int = 2
    memory: str = "1g"
    daemon_memory: str = "256m"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return dict(
            os.environ,
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_WORKER_DIR=str(self.workdir / "work"),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
        )

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        self.procs.append(
            subprocess.Popen(
                cmd,
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        log.close()

    def start(self) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "work").mkdir(exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            "--host",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--webui-port",
            str(free_port()),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.workdir / "work"),
        )
        try:
            self._wait_for_worker()
        except Exception:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, cores, running and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            loaded: dict[str, Any] = json.loads(r.read())
        return loaded

    def _wait_for_worker(self) -> None:
        deadline = time.time() + STARTUP_S
        while time.time() < deadline:
            for proc, name in zip(self.procs, ("master", "worker"), strict=False):
                if proc.poll() is not None:
                    raise RuntimeError(f"spark {name} exited ({proc.returncode}): {self.log_tail(name)}")
            try:
                if any(w.get("state") == "ALIVE" for w in self.status().get("workers", [])):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"no worker registered within {STARTUP_S:.0f} s: {self.log_tail('worker')}")

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """End both daemons' process groups (the worker's executors included)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
