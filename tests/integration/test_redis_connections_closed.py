"""Every redis-py client the auditor opens is closed by the code that opened it, not by the garbage collector.

A spy keeps each client `connect()` makes alive after its caller is done with it, as a collector that has
not run yet would (or a traceback holding the caller's frame, or an interpreter without reference
counting); the servers' CLIENT LIST must then show no connection of the auditor once a call returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from audit.errors import ConfigError, SourceConnectError
from audit.local.redis_cluster import LocalCluster, start_cluster
from audit.local.redis_sentinel import SentinelGroup, SentinelServer, start_sentinel_group
from audit.local.redis_server import RedisServer, wait_acked
from audit.sources.redis.client import connect
from audit.sources.redis.endpoints import parse_endpoint
from audit.sources.redis.fleet_check import ShardReplicationCheck
from audit.sources.redis.fleet_health import probe
from audit.sources.redis.routing import ClusterKeyReader
from audit.sources.redis.topology import discover, discover_cluster, discover_sentinel
from tests.integration.helpers import findings, latest_run, run_cli, write_inventory

pytestmark = pytest.mark.integration

Server = RedisServer | SentinelServer


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    g = start_sentinel_group(Path(tmp_path_factory.mktemp("sentinel")))
    try:
        for i in range(50):
            g.master.client().set(f"k:{i}", i)
        wait_acked(g.master, g.replica)
        yield g
    finally:
        g.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(Path(tmp_path_factory.mktemp("cluster")), replicas_per_master=0)
    yield c
    c.stop()


@pytest.fixture()
def kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[redis.Redis]]:
    """Every client the auditor makes, kept alive until the test ends."""
    made: list[redis.Redis] = []
    real = redis.Redis.from_url

    def spy(url: str, **kwargs: Any) -> redis.Redis:
        client = real(url, **kwargs)
        made.append(client)
        return client

    monkeypatch.setattr(redis.Redis, "from_url", staticmethod(spy))
    yield made
    for c in made:
        c.close()


def _ids(server: Server) -> set[int]:
    """The ids of the server's clients but the one asking."""
    c = server.client()
    try:
        me = int(c.client_id())
        return {int(x["id"]) for x in c.client_list() if int(x["id"]) != me}
    finally:
        c.close()


def left_open(servers: list[Server], call: Callable[[], object]) -> dict[int, set[int]]:
    """The connections `call` opened and left open, by server port (the server notices a close within ms)."""
    before = {s.port: _ids(s) for s in servers}
    call()
    deadline = time.time() + 3
    while True:
        left = {s.port: ids for s in servers if (ids := _ids(s) - before[s.port])}
        if not left or time.time() > deadline:
            return left
        time.sleep(0.05)


def sentinel_endpoint(group: SentinelGroup, service: str | None = None) -> Any:
    return parse_endpoint({"sentinels": group.sentinel_addresses, "service": service or group.service}, "x")


def servers_of(group: SentinelGroup) -> list[Server]:
    return [group.master, group.replica, *group.sentinels]


def test_discovery_probes_and_replication_samples_close_their_clients(
    group: SentinelGroup, kept: list[redis.Redis]
) -> None:
    def sentinel() -> None:
        topo = discover(sentinel_endpoint(group))
        assert all(s.info is not None for s in probe(topo).values())
        check = ShardReplicationCheck(None)  # type: ignore[arg-type]
        check.pair = type("P", (), {"name": "p"})()  # type: ignore[assignment]
        assert check._sample(topo.shards[0], topo.shards[0].replicas[0]).replica

    def standalone() -> None:
        topo = discover(parse_endpoint(group.master.url, "x"))  # type: ignore[arg-type]
        assert [r.port for r in topo.shards[0].replicas] == [group.replica.port]
        probe(topo)

    for call in (sentinel, standalone):
        assert left_open(servers_of(group), call) == {}
    assert len(kept) >= 7  # the spy saw them: sentinel, master and replica, again and again


def test_failed_discoveries_close_their_clients(group: SentinelGroup, kept: list[redis.Redis]) -> None:
    group.master.client().execute_command("ACL", "SETUSER", "noinfo", "on", "nopass", "+@read", "-info", "allkeys")  # type: ignore[no-untyped-call]

    def refused_info() -> None:  # connected, then INFO refused
        with pytest.raises(SourceConnectError, match="refused INFO"):
            connect(f"redis://noinfo@127.0.0.1:{group.master.port}", role="x")

    def not_a_cluster() -> None:
        with pytest.raises(ConfigError, match="not in cluster mode"):
            discover_cluster(group.master.url)

    def unknown_service() -> None:
        with pytest.raises(SourceConnectError, match="do not know service"):
            discover_sentinel(sentinel_endpoint(group, "nobody"))

    def data_node_as_sentinel() -> None:
        with pytest.raises(SourceConnectError, match="refused SENTINEL"):
            discover_sentinel(parse_endpoint({"sentinels": [f"127.0.0.1:{group.master.port}"], "service": "m"}, "x"))  # type: ignore[arg-type]

    for call in (refused_info, not_a_cluster, unknown_service, data_node_as_sentinel):
        assert left_open(servers_of(group), call) == {}, call.__name__


def test_cluster_discovery_and_its_key_reader_close_their_clients(
    cluster: LocalCluster, kept: list[redis.Redis]
) -> None:
    def discovered() -> None:
        topo = discover(parse_endpoint({"url": cluster.url(), "topology": "cluster"}, "x"))  # type: ignore[arg-type]
        assert len(topo.shards) == 3 and all(s.info is not None for s in probe(topo).values())
        reader = ClusterKeyReader(topo, page=100, window_bytes=1 << 20)
        try:
            assert len(reader.read([f"k:{i}".encode() for i in range(20)])) == 20
        finally:
            reader.close()

    assert left_open(list(cluster.nodes), discovered) == {}


def test_a_whole_audit_leaves_no_connection_open(
    group: SentinelGroup, kept: list[redis.Redis], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a sentinel group (every fleet check, snapshot in threads) and its master and replica as a standalone pair
    pairs = [
        {"name": "ha", "kind": "redis", "fleet_snapshot": "threads",
         "master": {"sentinels": group.sentinel_addresses, "service": group.service}},
        {"name": "plain", "kind": "redis", "master": group.master.url, "replica": group.replica.url},
    ]  # fmt: skip
    inv = write_inventory(tmp_path / "inv.yaml", pairs, recheck_interval_s=0.2, recheck_rounds=2)
    out = tmp_path / "out"
    codes: list[int] = []

    def audit() -> None:
        codes.append(run_cli(["run", "-i", str(inv), "-o", str(out)], monkeypatch))

    assert left_open(servers_of(group), audit) == {}
    assert codes == [0] and findings(latest_run(out)) == []


def test_a_pika_audit_leaves_no_connection_open(
    group: SentinelGroup, kept: list[redis.Redis], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Pika kind's replication and binlog checks open their own clients too (Pika faces over the
    group's master and replica: each face holds an upstream connection exactly as long as its client)."""
    from tests.pika_front import start_pika_pair

    fm, fs = start_pika_pair(group.master.port, group.replica.port, [0])
    try:
        pairs = [{"name": "pk", "kind": "pika", "master": fm.url, "replica": fs.url, "dbs": [0]}]
        inv = write_inventory(tmp_path / "inv.yaml", pairs, recheck_interval_s=0.2, recheck_rounds=2)
        codes: list[int] = []

        def audit() -> None:
            codes.append(run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch))

        assert left_open([group.master, group.replica], audit) == {}
        assert codes == [0], codes
    finally:
        fm.stop()
        fs.stop()
