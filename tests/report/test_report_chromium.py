"""report.html, the daily report and the verification certificate, opened in headless Chromium.

Real outputs: two audit runs of a real redis-server pair (the second with more divergences, so a
category has more findings than the report lists), a verification of the same two servers, and the
daily report over their history, all made by the CLI. Each page is loaded in Debian's `chromium`; a
script appended to a copy of the page measures what Chromium laid out (verdicts, table rows, image
sizes, links) into the DOM, which `--dump-dom` hands back. A screenshot checks the page is not blank.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit import defaults
from audit.local.redis_server import start_pair, wait_in_sync
from audit.local.sample import load_sample, plant_divergences
from tests.integration.helpers import run_cli, write_inventory

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)")

MEASURE = """
<script>
window.addEventListener("load", () => {
  const text = (el) => (el ? el.textContent.trim() : null);
  const out = {
    title: document.title,
    verdict: text(document.getElementById("verdict")),
    pairs: [...document.querySelectorAll("#pairs tr[data-pair]")].map((tr) => ({pair: tr.dataset.pair,
                                                                             text: tr.innerText})),
    findings: [...document.querySelectorAll("table.findings")].map((t) => ({category: t.dataset.category,
      total: Number(t.dataset.total), rows: t.querySelectorAll("tr.finding").length,
      more: text(t.querySelector("tr.more"))})),
    runs: [...document.querySelectorAll("table.runs tr.run")].map((tr) => tr.dataset.run),
    images: [...document.images].map((i) => ({chart: i.dataset.chart || "", natural: [i.naturalWidth, i.naturalHeight],
      shown: [i.getBoundingClientRect().width, i.getBoundingClientRect().height], complete: i.complete})),
    links: [...document.querySelectorAll("a[href]")].map((a) => a.getAttribute("href")),
    body: document.body.innerText,
  };
  const pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium(*args: str, profile: Path) -> str:
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def open_page(page: Path, tmp_path: Path) -> dict[str, Any]:
    """Load `page` in Chromium (through a measuring copy beside it, so relative links stay valid)."""
    probe = page.with_name(f".probe-{page.name}")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    try:
        dom = chromium("--virtual-time-budget=15000", "--dump-dom", probe.as_uri(), profile=tmp_path / "profile")
    finally:
        probe.unlink()
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    measured["dom"] = dom
    return measured


def assert_links_resolve(page: Path, links: list[str]) -> list[Path]:
    targets = []
    for href in links:
        if href.startswith(("#", "http:", "https:", "data:", "mailto:")):
            continue
        target = (page.parent / href.split("#", 1)[0]).resolve()
        assert target.is_file(), f"{page.name}: link {href} -> {target} does not exist"
        targets.append(target)
    return targets


def assert_images_drawn(measured: dict[str, Any], charts: set[str]) -> None:
    images = measured["images"]
    assert {i["chart"] for i in images} >= charts, images
    for i in images:
        assert i["complete"] and min(i["natural"]) > 50 and min(i["shown"]) > 50, i


def assert_not_blank(page: Path, tmp_path: Path) -> None:
    from matplotlib.image import imread

    shot = tmp_path / f"{page.stem}.png"
    chromium("--window-size=1280,2000", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    pixels = imread(shot)
    inked = (pixels[..., :3].min(axis=2) < 0.9).mean()
    assert inked > 0.02, f"{shot}: only {inked:.1%} of the page is not white"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Two audit runs, one verification and the daily report, all written by the CLI."""
    work = tmp_path_factory.mktemp("report-pages")
    out = work / "out"
    master, replica = start_pair(work / "servers")
    try:
        load_sample(master.client(), n_keys=2000, big_hash_fields=1000)
        wait_in_sync(master, replica)
        plant_divergences(replica.client())
        inv = write_inventory(
            work / "inv.yaml", [{"name": "cache", "kind": "redis", "master": master.url, "replica": replica.url}]
        )
        with pytest.MonkeyPatch.context() as mp:
            assert run_cli(["run", "-i", str(inv), "-o", str(out)], mp) == 1
            # more missing keys than the report lists for one category
            replica.client().delete(*[b"s:%d" % i for i in range(100, 100 + 10 * (defaults.FINDINGS_SAMPLE + 7), 10)])
            assert run_cli(["run", "-i", str(inv), "-o", str(out)], mp) == 1
            code = run_cli(
                [
                    "verify",
                    "--source",
                    master.url,
                    "--target",
                    replica.url,
                    "--name",
                    "cache-copy",
                    "--setting",
                    "recheck_interval_s=0.2",
                    "-o",
                    str(work / "verifications"),
                ],
                mp,
            )
            assert code == 1
            assert run_cli(["daily-report", "-o", str(out), "--days", "1"], mp) == 0
    finally:
        replica.stop()
        master.stop()
    runs = sorted((p.parent for p in out.glob("*/report.html")), key=lambda p: p.name)
    assert len(runs) == 2
    (certificate,) = work.glob("verifications/*/certificate.html")
    (daily,) = (out / "reports").glob("daily-*.html")
    yield {
        "first": runs[0] / "report.html",
        "second": runs[1] / "report.html",
        "daily": daily,
        "certificate": certificate,
    }


@needs_chromium
def test_run_report_in_chromium(outputs: dict[str, Path], tmp_path: Path) -> None:
    page = outputs["second"]
    m = open_page(page, tmp_path)
    assert m["verdict"] == "failed" and m["title"].endswith(": failed")
    assert [p["pair"] for p in m["pairs"]] == ["cache"]
    assert "missing_on_replica: 58" in m["pairs"][0]["text"]
    tables = {t["category"]: t for t in m["findings"]}
    assert set(tables) == {"missing_on_replica", "extra_on_replica", "value_mismatch", "type_mismatch", "ttl_mismatch"}
    missing = tables["missing_on_replica"]
    assert (missing["total"], missing["rows"]) == (58, defaults.FINDINGS_SAMPLE)  # first N rows, and the total
    assert missing["more"] == "… and 8 more in findings.parquet"
    assert (tables["value_mismatch"]["total"], tables["value_mismatch"]["rows"]) == (2, 2)
    assert "58 in all, first 50 shown" in m["body"]
    assert_images_drawn(m, {"categories", "offsets"})
    targets = assert_links_resolve(page, m["links"])
    names = {t.relative_to(page.parent).as_posix() for t in targets}
    assert "gate/data_docs/index.html" in names and "summary.json" in names
    assert any(n.startswith("gate/data_docs/validations/") for n in names)
    assert any(n.startswith("gate/data_docs/expectations/") for n in names)
    assert_not_blank(page, tmp_path)


@needs_chromium
def test_daily_report_in_chromium(outputs: dict[str, Path], tmp_path: Path) -> None:
    page = outputs["daily"]
    m = open_page(page, tmp_path)
    assert m["title"].startswith("replica-audit daily report ")
    assert [p["pair"] for p in m["pairs"]] == ["cache"]
    assert "failed" in m["pairs"][0]["text"] and "failed ×2" in m["pairs"][0]["text"]
    runs = [outputs["second"].parent.name, outputs["first"].parent.name]
    assert m["runs"] == runs  # newest first
    assert_images_drawn(m, {"categories", "lag", "offsets"})
    targets = assert_links_resolve(page, m["links"])
    assert {outputs["first"], outputs["second"]} <= set(targets)
    assert sum(1 for t in targets if t.name == "index.html" and "data_docs" in t.parts) == 2
    assert "2 runs:" in m["body"]
    assert_not_blank(page, tmp_path)


@needs_chromium
def test_verification_certificate_in_chromium(outputs: dict[str, Path], tmp_path: Path) -> None:
    page = outputs["certificate"]
    cert = json.loads(page.with_name("certificate.json").read_text())
    m = open_page(page, tmp_path)
    assert m["verdict"] == cert["verdict"] == "failed"
    assert cert["source"]["content"]["digest"] in m["body"] and cert["target"]["content"]["digest"] in m["body"]
    assert "Digests differ" in m["body"]
    assert_links_resolve(page, m["links"])
    assert_not_blank(page, tmp_path)
