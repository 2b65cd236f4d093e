"""Start a real Redis Cluster on loopback: N masters with R replicas each, created by `redis-cli --cluster`.

Used by the fleet tests and benches. Each node is an :class:`~audit.local.redis_server.RedisServer` with
`cluster-enabled yes`; `redis-cli --cluster create` assigns the 16384 slots and the replicas, then
:func:`start_cluster` waits until every node says `cluster_state:ok`, knows every other node, and every
replica's link is up and caught up. Automatic failover is off by default (`cluster-replica-no-failover`),
so a test that stops a master sees an unreachable shard, not a replica promoted behind its back.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from audit.local.redis_server import RedisServer

CLUSTER_BUS_OFFSET = 10000
"""A cluster node also listens on its port + 10000 (the cluster bus)."""


def free_cluster_port() -> int:
    """A free loopback port whose cluster-bus port (port + 10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + CLUSTER_BUS_OFFSET >= 65536:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair (port, port + 10000) on loopback")


@dataclass
class LocalCluster:
    """A running cluster: `masters[i]` owns the i-th slot range, `replicas[i]` are its replicas."""

    workdir: Path
    masters: list[RedisServer] = field(default_factory=list)
    replicas: list[list[RedisServer]] = field(default_factory=list)
    password: str | None = None
    node_args: list[str] = field(default_factory=list)
    """The options every node was started with (what :meth:`add_replica` starts one more with)."""

    @property
    def nodes(self) -> list[RedisServer]:
        return [*self.masters, *(r for rs in self.replicas for r in rs)]

    def url(self, server: RedisServer | None = None) -> str:
        """redis://[:password@]127.0.0.1:port of a node (the first master by default)."""
        port = (server or self.masters[0]).port
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{port}"

    def node(self, server: RedisServer) -> redis.Redis:
        """A plain (non-cluster) client of one node."""
        return redis.Redis(host="127.0.0.1", port=server.port, password=self.password, protocol=2)

    def cluster_client(self) -> redis.RedisCluster:
        """A cluster-aware client (routes by slot, follows MOVED/ASK): for loading data in tests."""
        return redis.RedisCluster(host="127.0.0.1", port=self.masters[0].port, password=self.password)

    def node_id(self, server: RedisServer) -> str:
        return str(self.node(server).execute_command("CLUSTER", "MYID").decode())  # type: ignore[no-untyped-call]

    def server_at(self, port: int) -> RedisServer:
        return next(s for s in self.nodes if s.port == port)

    def restart(self, server: RedisServer) -> None:
        """Start a stopped node again: it rejoins from its nodes.conf (empty: nothing is persisted)."""
        server.start()
        if self.password:
            c = server.client()
            c.config_set("masterauth", self.password)
            c.config_set("requirepass", self.password)

    def add_replica(self, master: RedisServer) -> RedisServer:
        """Start one more node and join it as a replica of `master` (`redis-cli --cluster add-node
        --cluster-slave`): a shard with more replicas than the others. Returns it once the cluster is
        healthy again and it has caught up."""
        server = RedisServer(free_cluster_port(), self.workdir / f"node{len(self.nodes)}", list(self.node_args))
        server.start()
        try:
            if self.password:  # before it joins: redis-cli authenticates to every node with the one password
                c = server.client()
                c.config_set("masterauth", self.password)
                c.config_set("requirepass", self.password)
            args = ["--cluster", "add-node", f"127.0.0.1:{server.port}", f"127.0.0.1:{master.port}"]
            _redis_cli([*args, "--cluster-slave", "--cluster-master-id", self.node_id(master)], self.password)
            self.replicas[self.masters.index(master)].append(server)
            self.wait_healthy()
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> None:
        """SIGTERM every node first, then wait for each: stopping them one by one takes seconds."""
        for s in self.nodes:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.terminate()
        for s in self.nodes:
            s.stop()

    def wait_healthy(self, timeout_s: float = 30) -> None:
        """Until every node reports cluster_state:ok and knows all nodes, and every replica is in sync."""
        deadline = time.time() + timeout_s
        want = len(self.nodes)
        replica_count = sum(map(len, self.replicas))
        while time.time() < deadline:
            if all(_cluster_ok(self.node(s), want, replica_count) for s in self.nodes):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"cluster in {self.workdir} did not reach cluster_state:ok")
        for master, replicas in zip(self.masters, self.replicas, strict=True):
            for r in replicas:
                self.wait_in_sync(master, r, max(1.0, deadline - time.time()))

    def wait_in_sync(self, master: RedisServer, replica: RedisServer, timeout_s: float = 30) -> None:
        """Until `replica`'s link is up and it has processed what `master` has written so far."""
        target = int(self.node(master).info("replication")["master_repl_offset"])
        c = self.node(replica)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            info = c.info("replication")
            if info.get("master_link_status") == "up" and int(info.get("slave_repl_offset", -1)) >= target:
                return
            time.sleep(0.05)
        raise RuntimeError(f"replica {replica.port} did not catch up with master {master.port}")

    def wait_all_in_sync(self, timeout_s: float = 30) -> None:
        for master, replicas in zip(self.masters, self.replicas, strict=True):
            for r in replicas:
                self.wait_in_sync(master, r, timeout_s)


def _cluster_ok(client: redis.Redis, nodes: int, replicas: int) -> bool:
    """This node says the cluster is ok, knows every node, and has learned every replica's role
    (roles travel by gossip after `redis-cli --cluster create` returns, node by node)."""
    try:
        info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        view = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    except redis.RedisError:
        return False
    text = info.decode() if isinstance(info, bytes) else str(info)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    lines = (view.decode() if isinstance(view, bytes) else str(view)).splitlines()
    known_replicas = sum(1 for line in lines if "slave" in line.split()[2].split(","))
    ok = fields.get("cluster_state") == "ok" and int(fields.get("cluster_known_nodes", 0)) >= nodes
    return ok and known_replicas == replicas


def _create(servers: list[RedisServer], replicas_per_master: int) -> None:
    args = ["--cluster", "create", *(f"127.0.0.1:{s.port}" for s in servers)]
    _redis_cli([*args, "--cluster-replicas", str(replicas_per_master), "--cluster-yes"])


def _redis_cli(args: list[str], password: str | None = None) -> None:
    exe = shutil.which("redis-cli")
    if exe is None:
        raise RuntimeError("redis-cli not found: run `make setup` (apt-get install redis-tools)")
    auth = ["-a", password, "--no-auth-warning"] if password else []
    done = subprocess.run([exe, *auth, *args], capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        out = (done.stdout + done.stderr).decode("utf-8", "replace")[-2000:]
        raise RuntimeError(f"redis-cli {' '.join(args[:2])} failed ({done.returncode}): {out}")


def _at(servers: list[RedisServer], port: int) -> RedisServer:
    return next(s for s in servers if s.port == port)


def _assignment(cluster: LocalCluster, servers: list[RedisServer], masters: int, timeout_s: float = 30) -> None:
    """Read who follows whom from CLUSTER NODES once the view is complete: redis-cli picks the replicas'
    masters itself, and the nodes learn each other's roles by gossip a moment after it returns."""
    deadline = time.time() + timeout_s
    while True:
        _read_assignment(cluster, servers)
        formed = len(cluster.masters) == masters and sum(map(len, cluster.replicas)) == len(servers) - masters
        if formed:
            return
        if time.time() > deadline:
            raise RuntimeError(f"cluster in {cluster.workdir}: roles not settled after {timeout_s} s")
        time.sleep(0.05)


def _read_assignment(cluster: LocalCluster, servers: list[RedisServer]) -> None:
    lines = cluster.node(servers[0]).execute_command("CLUSTER", "NODES").decode().splitlines()  # type: ignore[no-untyped-call]
    by_id: dict[str, tuple[int, str, str, int]] = {}  # id -> (port, role, master id, first slot)
    for line in lines:
        parts = line.split()
        port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
        role = "master" if "master" in parts[2].split(",") else "replica"
        first = int(parts[8].split("-")[0]) if len(parts) > 8 else -1
        by_id[parts[0]] = (port, role, parts[3], first)
    owners = sorted((v[3], v[0], node_id) for node_id, v in by_id.items() if v[1] == "master" and v[3] >= 0)
    cluster.masters = [_at(servers, port) for _, port, _ in owners]
    cluster.replicas = [
        [_at(servers, v[0]) for v in by_id.values() if v[1] == "replica" and v[2] == node_id]
        for _, _, node_id in owners
    ]


def start_cluster(
    workdir: Path,
    *,
    masters: int = 3,
    replicas_per_master: int = 1,
    password: str | None = None,
    node_timeout_ms: int = 5000,
    failover: bool = False,
    extra: list[str] | None = None,
) -> LocalCluster:
    """Start `masters * (1 + replicas_per_master)` nodes, create the cluster, wait until it is healthy.

    With `password`, every node gets `requirepass` and `masterauth` once the cluster is formed (redis-cli
    creates it without auth), so clients must use :meth:`LocalCluster.url`.
    """
    n = masters * (1 + replicas_per_master)
    opts = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        str(node_timeout_ms),
        "--cluster-replica-no-failover",
        "no" if failover else "yes",
        # a replica's first full sync otherwise waits 5 s for more replicas to share the transfer
        "--repl-diskless-sync-delay",
        "0",
        *(extra or []),
    ]
    cluster = LocalCluster(workdir, node_args=opts)
    servers: list[RedisServer] = []
    try:
        for i in range(n):
            servers.append(RedisServer(free_cluster_port(), workdir / f"node{i}", list(opts)).start())
        _create(servers, replicas_per_master)
        _assignment(cluster, servers, masters)
        cluster.wait_healthy()
        if password:
            for s in servers:
                c = s.client()
                c.config_set("masterauth", password)
                c.config_set("requirepass", password)
            cluster.password = password
            cluster.wait_all_in_sync()
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return cluster
