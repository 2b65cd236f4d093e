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
import os
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
    severities: [...document.querySelectorAll(".sev")].map((e) => [e.textContent.trim().split(" ").pop(),
                                                              getComputedStyle(e).backgroundColor]),
    details: Object.fromEntries([...document.querySelectorAll("table.findings")].map((t) => [t.dataset.category,
      [...t.querySelectorAll("tr.finding")].map((tr) => ({
        sides: [...tr.querySelectorAll("table.sides tr")].slice(1).map((r) => [...r.children].map((c) => c.innerText)),
        fields: Object.fromEntries([...tr.querySelectorAll("dl.fields dt")].map((dt) =>
                                   [dt.innerText, dt.nextElementSibling.innerText])),
        digests: [...tr.querySelectorAll("td.digests code")].map((c) => [c.innerText, c.title]),
        width: tr.getBoundingClientRect().width}))])),
    width: document.documentElement.scrollWidth,
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


SCREENSHOTS = (
    Path(os.environ.get("REPLICA_AUDIT_SCREENSHOTS", "")) if os.environ.get("REPLICA_AUDIT_SCREENSHOTS") else None
)
"""Where to keep the screenshots for a person to look at (unset: only in the test's temporary directory)."""


def assert_not_blank(page: Path, tmp_path: Path, height: int = 2000) -> Any:
    from matplotlib.image import imread

    shot = tmp_path / f"{page.stem}.png"
    chromium(f"--window-size=1280,{height}", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, SCREENSHOTS / shot.name)
    pixels = imread(shot)
    inked = (pixels[..., :3].min(axis=2) < 0.9).mean()
    assert inked > 0.02, f"{shot}: only {inked:.1%} of the page is not white"
    return pixels


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
    assert_images_drawn(m, {"categories", "offsets", "history"})
    assert_links_resolve(page, m["links"])
    # the Data Docs: the shared site's index and this pair's validation page and suite, through gate/data_docs
    docs = [h for h in m["links"] if h.startswith("gate/data_docs/")]
    assert "gate/data_docs/index.html" in docs and "summary.json" in m["links"]
    assert any(h.startswith(f"gate/data_docs/validations/redis_audit/{page.parent.name}@cache/") for h in docs), docs
    assert "gate/data_docs/expectations/redis_audit.html" in docs
    assert_severities_distinct(m)
    assert_details_readable(m)
    assert m["width"] <= 1400, "the findings table overflows the page"
    pixels = assert_not_blank(page, tmp_path, height=4000)
    assert_colour_drawn(pixels, (0xC0, 0x39, 0x2B)) and assert_colour_drawn(pixels, (0xE0, 0xA1, 0x00))


def assert_severities_distinct(m: dict[str, Any]) -> None:
    """critical red, warning amber (the TTL finding), each colour always meaning one severity."""
    colours: dict[str, set[str]] = {}
    for severity, colour in m["severities"]:
        colours.setdefault(severity, set()).add(colour)
    assert {"critical", "warning"} <= set(colours), colours
    assert all(len(c) == 1 for c in colours.values()), colours
    assert colours["critical"] == {"rgb(192, 57, 43)"} and colours["warning"] == {"rgb(224, 161, 0)"}
    tables = {t["category"]: t for t in m["findings"]}
    assert tables  # every table says its severity
    assert 'data-category="ttl_mismatch" data-severity="warning"' in m["dom"]


def assert_details_readable(m: dict[str, Any]) -> None:
    """Labelled fields, not JSON: the TTL difference in seconds, expiry as a time, lengths side by side."""
    [ttl] = m["details"]["ttl_mismatch"]
    assert ttl["fields"]["TTL difference"] == "+600 s (the replica's copy expires later)"
    sides = {row[0]: row[1:] for row in ttl["sides"]}
    assert set(sides) >= {"Type", "Length", "TTL", "Expires"}
    m_expiry, r_expiry = sides["Expires"]
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", m_expiry), m_expiry
    assert m_expiry < r_expiry
    assert sides["Type"] == ["string", "string"]
    mismatches = m["details"]["value_mismatch"]
    big = next(f for f in mismatches if dict((r[0], r[1:]) for r in f["sides"])["Type"] == ["hash", "hash"])
    assert dict((r[0], r[1:]) for r in big["sides"])["Length"] == ["1,000", "1,001"]  # a field added on the replica
    for shown, full in big["digests"]:
        assert full.startswith(shown.rstrip("…")) and len(shown) <= 13 < len(full)
    values = [v for fs in m["details"].values() for f in fs for v in (*f["fields"].values(), *map(str, f["sides"]))]
    assert values and not any("{" in v for v in values)  # no raw JSON left


def assert_colour_drawn(pixels: Any, rgb: tuple[int, int, int]) -> bool:
    import numpy as np

    target = np.array(rgb) / 255.0
    close = (np.abs(pixels[..., :3] - target) < 0.04).all(axis=2)
    assert close.sum() > 200, f"colour {rgb} hardly drawn ({close.sum()} px)"
    return True


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
    # each run's own validation page (the site's index lists only the latest results)
    pages = [t for t in targets if "data_docs" in t.parts and "validations" in t.parts and t.suffix == ".html"]
    assert len(pages) == 2 and len({p.parts[-3] for p in pages}) == 2  # one per run: <run_id>@cache
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
    # the gate's meanings in a verification's words; the category names stay the audit's
    assert [f["meaning"] for f in cert["gate"]["failed"]] and all(
        " master" not in f["meaning"] and " replica" not in f["meaning"] for f in cert["gate"]["failed"]
    )
    assert "missing on the target" in m["body"]
    assert_links_resolve(page, m["links"])
    assert_not_blank(page, tmp_path)
