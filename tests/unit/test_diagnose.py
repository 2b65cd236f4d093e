"""The catalog's matching rules as docs/incidents.md states them, and a section there for every code."""

from __future__ import annotations

import re
from typing import Any

import pytest

from audit.diagnose import catalog, diagnose, parse_catalog
from audit.findings import Finding
from tests.conftest import REPO

ENTRY = """
- code: TEST_SIGNATURE
  kinds: [pika]
  categories: [missing_range]
  all: {{field: {condition}}}
  meaning: test
  source: test
"""


def _diagnosed(condition: str, evidence: dict[str, Any]) -> str | None:
    finding = Finding(check="c", category="missing_range", evidence=evidence)
    (out,) = diagnose("pika", [finding], parse_catalog(ENTRY.format(condition=condition)))
    return out.diagnosis


@pytest.mark.parametrize(
    ("condition", "evidence", "matches"),
    [
        ("3", {"field": 3}, True),
        ("3", {"field": None}, False),
        ("3", {}, False),
        ("{gt: 0}", {"field": 1}, True),
        ("{gt: 0}", {"field": None}, False),  # null fails the ordering operators
        ("{ne: 3}", {"field": None}, True),  # and passes ne
        ("{ne: null}", {"field": None}, False),  # how an entry requires a value
        ("{ne: 3}", {}, False),  # absent fails whatever the operator
        ("{in: [a, null]}", {"field": None}, True),
        ("{in: [a, b]}", {"field": None}, False),
    ],
)
def test_conditions_on_absent_and_null_fields(condition: str, evidence: dict[str, Any], matches: bool) -> None:
    assert (_diagnosed(condition, evidence) == "TEST_SIGNATURE") is matches


def test_every_code_in_the_catalog_has_its_section_in_incidents_md() -> None:
    # the report and signatures.yaml link to docs/incidents.md#<code>: a heading per code makes the anchor
    headings = set(re.findall(r"^## ([A-Z][A-Z0-9_]+)$", (REPO / "docs" / "incidents.md").read_text(), re.M))
    codes = {s.code for s in catalog()}
    assert codes, "the shipped catalog is empty"
    assert codes - headings == set()
