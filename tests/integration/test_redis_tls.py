"""TLS (rediss://) against real redis-servers with a private CA: a standalone server without a password,
and a Redis Cluster with `tls-cluster yes` that also keeps its plain ports (as during a move to TLS).

The CA and the server certificate are made with `openssl` for 127.0.0.1 (tests/integration/tls_certs.py);
the cluster is created with `redis-cli --tls`, so its bus runs TLS and CLUSTER SHARDS lists each node's
`port` and `tls-port`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from audit.local.redis_cluster import free_cluster_port
from audit.local.redis_server import RedisServer, free_port
from audit.sources.redis.client import connect
from audit.sources.redis.endpoints import parse_endpoint
from audit.sources.redis.fleet_health import probe
from audit.sources.redis.topology import discover
from tests.integration.helpers import findings, latest_run, run_cli, write_inventory
from tests.integration.tls_certs import make_certs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the certificates"),
]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(Path(tmp_path_factory.mktemp("tls")))


def tls_args(certs: Path, tls_port: int) -> list[str]:
    return [
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs / "server.crt"),
        "--tls-key-file", str(certs / "server.key"), "--tls-ca-cert-file", str(certs / "ca.crt"),
        "--tls-auth-clients", "no",
    ]  # fmt: skip


def tls_url(certs: Path, port: int) -> str:
    return f"rediss://127.0.0.1:{port}?ssl_ca_certs={certs / 'ca.crt'}"


def test_tls_connections_without_a_password_never_fail(certs: Path, tmp_path: Path) -> None:
    # no AUTH and no CLIENT SETINFO read a reply during set-up: a TLS 1.3 server's session tickets were
    # still unread when redis-py's pool checked the connection, and about one in five failed with
    # "Connection not ready" (a healthy server reported unreachable: exit 3)
    tls_port = free_port()
    server = RedisServer(free_port(), tmp_path / "s", tls_args(certs, tls_port)).start()
    try:
        url = tls_url(certs, tls_port)
        failures = []
        for _ in range(40):
            try:
                connect(url, role="tls").close()
            except Exception as e:  # counted, then shown
                failures.append(str(e))
        assert failures == []
        # the README's read-only rights on a user without a password (the default user): no PING
        rights = ["reset", "on", "nopass", "+@read", "+info", "+client|list", "+select", "allkeys"]
        server.client().execute_command("ACL", "SETUSER", "default", *rights)  # type: ignore[no-untyped-call]
        for _ in range(10):
            connect(url, role="tls").close()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tls_cluster(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[RedisServer, int]]]:
    """3 masters + 3 replicas, TLS bus and replication, plain ports kept: [(server, tls port)]."""
    workdir = Path(tmp_path_factory.mktemp("tls-cluster"))
    opts = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-replica-no-failover", "yes",
            "--repl-diskless-sync-delay", "0", "--tls-cluster", "yes", "--tls-replication", "yes"]  # fmt: skip
    nodes: list[tuple[RedisServer, int]] = []
    try:
        for i in range(6):
            tls_port = free_cluster_port()
            server = RedisServer(free_cluster_port(), workdir / f"n{i}", [*opts, *tls_args(certs, tls_port)])
            nodes.append((server.start(), tls_port))
        create = ["redis-cli", "--tls", "--cacert", str(certs / "ca.crt"), "--cluster", "create"]
        create += [f"127.0.0.1:{p}" for _, p in nodes] + ["--cluster-replicas", "1", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        _wait_synced([s for s, _ in nodes])
        yield nodes
    finally:
        for s, _ in nodes:
            s.stop()


def _wait_synced(servers: list[RedisServer], timeout_s: float = 30) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        infos = [s.client().info() for s in servers]
        ok = all(i["cluster_enabled"] == 1 for i in infos)
        ok = ok and all(s.client().cluster("info")["cluster_state"] == "ok" for s in servers)
        ok = ok and all(i["role"] == "master" or i.get("master_link_status") == "up" for i in infos)
        views = [s.client().execute_command("CLUSTER", "NODES").decode() for s in servers]  # type: ignore[no-untyped-call]
        roles_known = all(v.count("slave") == 3 for v in views)  # replicas' roles travel by gossip
        if ok and roles_known and sum(i["role"] == "slave" for i in infos) == 3:
            return
        time.sleep(0.1)
    raise RuntimeError("TLS cluster did not settle")


def test_a_tls_cluster_is_discovered_on_its_tls_ports_with_the_seed_options(
    certs: Path, tls_cluster: list[tuple[RedisServer, int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the nodes were reached on CLUSTER SHARDS' plain `port` and without the seed's ?ssl_ca_certs=: every
    # node "unreachable" (a TLS handshake against a plain port, or an unknown CA), exit 3
    tls_ports = {p for _, p in tls_cluster}
    seed = tls_url(certs, tls_cluster[0][1])
    topo = discover(parse_endpoint({"url": seed, "topology": "cluster"}, "pairs[0] (tls).master"))
    assert {n.port for n in topo.nodes} == tls_ports and len(topo.shards) == 3
    assert all("ssl_ca_certs=" in n.url for n in topo.nodes)
    states = probe(topo)
    assert [a for a, s in states.items() if s.info is None] == []

    writer = redis.RedisCluster(
        host="127.0.0.1", port=tls_cluster[0][1], ssl=True, ssl_ca_certs=str(certs / "ca.crt"), protocol=2
    )
    for i in range(300):
        writer.set(f"t:{i}", i)
    writer.close()
    _wait_synced([s for s, _ in tls_cluster])
    pair = {"name": "tls", "kind": "redis", "master": {"url": seed, "topology": "cluster"}, "fleet_snapshot": "threads"}
    inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_interval_s=0.2, recheck_rounds=2)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
    assert findings(latest_run(tmp_path / "out")) == []


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("ssl_ca_certs={junk}", "ssl_ca_certs {junk}: no CA certificate (PEM) in it"),
        ("ssl_certfile={junk}&ssl_keyfile={junk}", "ssl_certfile {junk} with ssl_keyfile {junk}: not a certificate"),
    ],
)
def test_a_tls_file_that_is_no_pem_in_a_url_is_a_config_error_naming_it(
    option: str,
    says: str,
    certs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `rediss://...?ssl_ca_certs=<a file that is no certificate>` was "master 127.0.0.1:P unreachable: Error
    # 136 connecting ... NO_CERTIFICATE_OR_CRL_FOUND": exit 3, which Airflow retries, for an inventory mistake
    junk = tmp_path / "not-a-cert.pem"
    junk.write_text("not a certificate\n")
    server = RedisServer(free_port(), tmp_path / "s", extra=tls_args(certs, free_port())).start()
    try:
        url = f"rediss://:Zq9pw@127.0.0.1:{server.port}?" + option.format(junk=junk)
        inv = write_inventory(tmp_path / "inv.yaml", [{"name": "t", "kind": "redis", "master": url, "replica": url}])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--quiet"], monkeypatch) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert says.format(junk=junk) in err and "Traceback" not in err and "Zq9pw" not in err
    finally:
        server.stop()
