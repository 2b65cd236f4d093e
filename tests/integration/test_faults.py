"""Sources that die during an audit, through a TCP proxy the test controls (tests/tcp_proxy.py): the pair
ends with exit 3 and a message naming the host, other pairs finish, nothing partial reads as a pass, and
`replica-audit run --resume RUN_ID` goes on from the last completed stage and, for an interrupted
snapshot, from its checkpointed SCAN cursor."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from audit.local.redis_server import RedisServer, start_pair, wait_in_sync
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration
KEYS = 12_000


@pytest.fixture()
def pair_behind_proxies(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer, TcpProxy, TcpProxy]]:
    master, replica = start_pair(tmp_path / "servers")
    master.client().mset({f"k:{i:06d}": b"v" * 40 for i in range(KEYS)})
    wait_in_sync(master, replica)
    m_proxy, r_proxy = TcpProxy(master.port), TcpProxy(replica.port)
    yield master, replica, m_proxy, r_proxy
    for proxy in (m_proxy, r_proxy):
        proxy.close()
    replica.stop()
    master.stop()


def inventory(tmp_path: Path, m_proxy: TcpProxy, r_proxy: TcpProxy, other: tuple[RedisServer, RedisServer]) -> Path:
    slow = {"max_keys_per_s": 2000, "max_latency_ms": None}  # about six seconds per side: time to cut it
    return write_inventory(
        tmp_path / "inv.yaml",
        [
            {"name": "faulty", "kind": "redis", "master": m_proxy.url, "replica": r_proxy.url, "dbs": [0], **slow},
            {"name": "bystander", "kind": "redis", "master": other[0].url, "replica": other[1].url, "dbs": [3]},
        ],
        recheck_interval_s=0.2,
    )


def cut_when(proxy: TcpProxy, ready: Callable[[], bool]) -> threading.Thread:
    """Cut the proxy as soon as `ready()` (e.g. the side's first checkpoint is written), from another thread."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        proxy.cut()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_replica_lost_mid_snapshot_ends_its_pair_and_resume_goes_on_from_the_checkpoint(
    pair_behind_proxies, redis_pair, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    _, _, m_proxy, r_proxy = pair_behind_proxies
    redis_pair[0].client(3).set("x", "1")
    wait_in_sync(*redis_pair)
    inv = inventory(tmp_path, m_proxy, r_proxy, redis_pair)
    out = tmp_path / "out"
    watcher = cut_when(r_proxy, lambda: any(out.glob("*/snapshots/faulty/replica/checkpoint.json")))
    code = run_cli(["run", "-i", str(inv), "-o", str(out)], monkeypatch)
    watcher.join()
    assert code == 3
    err = capsys.readouterr().err
    assert f"127.0.0.1:{r_proxy.port}" in err and "Traceback" not in err
    root = latest_run(out)
    pairs = {p["pair"]: p for p in summary(root)["pairs"]}
    assert pairs["faulty"]["status"] == "error" and pairs["bystander"]["status"] == "passed"
    assert summary(root)["verdict"] != "passed"
    checkpoint = json.loads((root / "snapshots" / "faulty" / "replica" / "checkpoint.json").read_text())
    assert not checkpoint["complete"] and checkpoint["parts"] >= 1 and 0 < checkpoint["counts"]["keys_scanned"] < KEYS

    r_proxy.restore()
    code = run_cli(["run", "-i", str(inv), "-o", str(out), "--resume", root.name], monkeypatch)
    assert code == 0, summary(root)["pairs"]
    meta = json.loads((root / "snapshots" / "faulty" / "replica" / "snapshot.json").read_text())
    assert meta["resumed_from"] is not None and meta["resumed_from"]["parts"] == checkpoint["parts"]
    assert meta["stats"]["keys_scanned"] >= KEYS  # the keys read before the cut count, none was lost
    assert findings(root) == [] and summary(root)["verdict"] == "passed"


def test_a_master_lost_mid_recheck_is_an_error_never_a_pass(pair_behind_proxies, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    _, replica, m_proxy, r_proxy = pair_behind_proxies
    r = replica.client()
    r.config_set("replica-read-only", "no")
    r.delete("k:000007")  # something for the recheck to re-read
    import audit.sources.redis.recheck as recheck_module

    real = recheck_module.read_keys

    def cut_first(reader, keys, pacer=None):  # type: ignore[no-untyped-def]
        m_proxy.cut()  # the master goes away as the recheck starts reading it
        return real(reader, keys, pacer)

    monkeypatch.setattr(recheck_module, "read_keys", cut_first)
    inv = write_inventory(
        tmp_path / "inv.yaml",
        [{"name": "p", "kind": "redis", "master": m_proxy.url, "replica": r_proxy.url, "dbs": [0]}],
    )
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
    err = capsys.readouterr().err
    assert "recheck" in err and "Traceback" not in err
    # the README's exit 3 names the host, here the master's (it said only "[Errno 104] Connection reset by peer")
    assert f"; master 127.0.0.1:{m_proxy.port} unreachable" in " ".join(err.split())
    s = summary(latest_run(tmp_path / "out"))["pairs"][0]
    assert s["status"] == "error" and s["gate"] is None and s["error"]["stage"] == "recheck"
