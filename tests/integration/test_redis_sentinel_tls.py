"""A Sentinel group that speaks TLS only, with a private CA: master, replica and sentinel each have their
plain port closed (`port 0`) and ask every client for a certificate (mutual TLS), so an audit that reads
any data at all read it through TLS with the inventory's CA and client certificate."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from audit.local.redis_sentinel import SentinelGroup, start_sentinel_group
from audit.local.redis_server import wait_acked
from audit.sources.redis.endpoints import SentinelEndpoint, parse_endpoint
from audit.sources.redis.fleet_health import probe
from audit.sources.redis.topology import discover
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.integration.tls_certs import make_certs, tls_files

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the certificates"),
]

KEYS = 300


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(Path(tmp_path_factory.mktemp("tls")) / "ca")


@pytest.fixture(scope="module")
def group(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    g = start_sentinel_group(Path(tmp_path_factory.mktemp("sentinel-tls")), tls=tls_files(certs, auth_clients=True))
    try:
        for s in (g.master, g.replica):  # no plain port to fall back on
            assert s.client().config_get("port") == {"port": "0"}
        for i in range(KEYS):
            g.master.client().set(f"k:{i}", i)
        wait_acked(g.master, g.replica)
        yield g
    finally:
        g.stop()


def files(certs: Path, ca: Path | None = None) -> dict[str, str]:
    return {
        "ssl_ca_certs": str(ca or certs / "ca.crt"),
        "ssl_certfile": str(certs / "client.crt"),
        "ssl_keyfile": str(certs / "client.key"),
    }


def endpoint(group: SentinelGroup, certs: Path, **data_files: str) -> dict[str, Any]:
    """The sentinel reached over rediss:// with its options in the URL; the data nodes' TLS files as given."""
    sentinel = f"rediss://{group.sentinel_addresses[0]}?{urlencode(files(certs), safe='/')}"
    return {"sentinels": [sentinel], "service": group.service, **data_files}


def audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master: dict[str, Any], pair: dict[str, Any] | None = None
) -> tuple[int, Path]:
    """`run` of the sentinel pair `ha-tls` on `master` (or of `pair` instead, when given)."""
    pair = pair or {"name": "ha-tls", "kind": "redis", "master": master, "fleet_snapshot": "threads"}
    inv = write_inventory(tmp_path / "inv.yaml", [pair], recheck_interval_s=0.2, recheck_rounds=2)
    return run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch), tmp_path / "out"


def said(capsys: pytest.CaptureFixture[str]) -> str:
    """What the run printed on stderr, on one line; an operator's mistake never shows a traceback."""
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err
    return err


def test_a_tls_only_group_with_a_private_ca_and_client_certificates_is_audited(
    group: SentinelGroup, certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the data nodes had no way to get the CA or a client certificate: every node unreachable, exit 3
    code, out = audit(tmp_path, monkeypatch, endpoint(group, certs, **files(certs)))
    run = latest_run(out)
    assert (code, findings(run)) == (0, [])
    s = summary(run)["pairs"][0]
    assert s["coverage"]["master_keys"] == KEYS and s["coverage"]["replica_keys"] == KEYS


def test_data_nodes_need_the_client_certificate(group: SentinelGroup, certs: Path) -> None:
    # the group does ask for one: the test above proves the inventory's certificate was presented
    ep = parse_endpoint(endpoint(group, certs, ssl_ca_certs=str(certs / "ca.crt")), "x")
    assert isinstance(ep, SentinelEndpoint)
    states = probe(discover(ep))
    assert sorted(a for a, s in states.items() if s.info is None) == sorted(
        f"127.0.0.1:{s.port}" for s in (group.master, group.replica)
    )


def test_a_wrong_ca_names_the_node_and_exits_3(
    group: SentinelGroup,
    certs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = make_certs(tmp_path / "other-ca")
    code, _ = audit(tmp_path, monkeypatch, endpoint(group, certs, **files(certs, ca=other / "ca.crt")))
    err = said(capsys)
    assert code == 3
    assert f"127.0.0.1:{group.master.port}" in err and "certificate verify failed" in err


def test_an_unreadable_tls_file_is_exit_2_naming_the_field(
    group: SentinelGroup,
    certs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = tmp_path / "nowhere" / "ca.crt"
    code, _ = audit(tmp_path, monkeypatch, endpoint(group, certs, **files(certs, ca=missing)))
    err = said(capsys)
    assert code == 2
    assert f"pair ha-tls master: ssl_ca_certs {missing}: no such readable file" in err


@pytest.mark.parametrize("where", ["sentinel", "standalone"])
def test_a_tls_file_missing_from_a_url_is_exit_2_naming_the_option(
    where: str,
    group: SentinelGroup,
    certs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file named in a URL's options (a sentinel's, a standalone or cluster seed's) is the operator's
    mistake too: it once read as every sentinel, or the server, being unreachable (exit 3)."""
    missing = tmp_path / "nowhere" / "ca.crt"
    options = urlencode({**files(certs), "ssl_ca_certs": str(missing)}, safe="/")
    if where == "sentinel":
        master = {"sentinels": [f"rediss://{group.sentinel_addresses[0]}?{options}"], "service": group.service}
        code, _ = audit(tmp_path, monkeypatch, master)
    else:
        urls = {
            side: f"rediss://127.0.0.1:{s.port}?{options}"
            for side, s in (("master", group.master), ("replica", group.replica))
        }
        code, _ = audit(tmp_path, monkeypatch, {}, {"name": "plain-tls", "kind": "redis", **urls})
    err = said(capsys)
    assert code == 2, err
    assert f"ssl_ca_certs {missing}: no such readable file" in err
