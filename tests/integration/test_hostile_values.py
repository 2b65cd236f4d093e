"""Hostile keys and values: NUL bytes, invalid UTF-8 and markup survive byte-exact into the findings
Parquet and are escaped in report.html and summary.json; none of them trips the audit."""

from __future__ import annotations

import pytest

from audit.local.redis_server import wait_in_sync
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = pytest.mark.integration

HOSTILE = [
    b"nul\x00inside",
    b"\xff\xfe not utf-8 \xc3\x28",
    b"<script>document.title='pwned'</script>",
    b"\"quotes' & <b>tags</b>",
    "ключ-日本語-🔑".encode(),
    b"",  # the empty key is a key too
]


def test_hostile_keys_are_byte_exact_in_parquet_and_escaped_in_the_report(fresh_pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = fresh_pair
    c = master.client()
    for i, key in enumerate(HOSTILE):
        c.set(key, b"<img src=x onerror=alert(1)>\x00" + bytes([i]))
        c.hset(b"h:" + key, key or b"f", b"\xff\x00<script>")
    wait_in_sync(master, replica)
    r = replica.client()
    r.config_set("replica-read-only", "no")
    r.delete(*HOSTILE)  # every hostile string key is missing on the replica
    inv = write_inventory(
        tmp_path / "inv.yaml", [{"name": "p", "kind": "redis", "master": master.url, "replica": replica.url}]
    )
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
    root = latest_run(tmp_path / "out")
    missing = {f["key"] for f in findings(root) if f["category"] == "missing_on_replica"}
    assert missing == set(HOSTILE)
    assert {f["category"] for f in findings(root)} == {"missing_on_replica"}  # the hashes agree
    html = (root / "report.html").read_text()
    assert "<script>document.title" not in html and "<img src=x" not in html
    assert "&lt;script&gt;" in html or "0x3c736372697074" in html  # shown escaped, or as hex
    shown = {f["key"] for f in summary(root)["pairs"][0]["findings_sample"]["missing_on_replica"]}
    assert "0x" + b"nul\x00inside".hex() in shown and "0x" + HOSTILE[1].hex() in shown  # not text: hex
    assert HOSTILE[2].decode() in shown and "ключ-日本語-🔑" in shown  # printable text stays text
