"""The terminal summary (audit/cli/render.py): what each kind compared, in its own unit."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from audit.cli.render import print_summary


def _pair(name: str, coverage: dict[str, Any]) -> dict[str, Any]:
    return {
        "pair": name,
        "status": "passed",
        "counts": {},
        "diagnoses": {},
        "coverage": coverage,
        "not_covered": [],
        "skipped_checks": {},
        "gate": None,
    }


def test_each_kind_says_what_it_compared() -> None:
    # a passing MySQL pair once read "0 keys compared": its coverage counts rows
    summary = {
        "run_id": "r",
        "verdict": "passed",
        "pairs": [
            _pair("shop-db", {"tables_compared": 2, "rows_compared": 6}),
            _pair("cache", {"keys_compared": 1200, "master_keys": 1200}),
            _pair("files", {}),
        ],
    }
    out = io.StringIO()
    print_summary(Console(file=out, width=200), summary, Path("/run"))
    text = out.getvalue()
    assert "2 tables compared" in text and "6 rows compared" in text and "1,200 keys compared" in text
    assert " 0 keys compared" not in text


def test_what_a_server_said_is_shown_with_its_brackets() -> None:
    # a sentinel's refusal reads "{sentinels: [host:port, ...], service: <name>}": rich took the bracket as markup
    said = "cache master 10.0.0.5:26379: give this side as {sentinels: [host:port, ...], service: <name>}"
    pair = {**_pair("cache", {}), "status": "error", "not_covered": [said]}
    pair["gate"] = {"failed": [{"column": "x[bold]", "observed": 1, "threshold": 0, "meaning": "see [red]"}]}
    out = io.StringIO()
    print_summary(Console(file=out, width=300), {"run_id": "r", "verdict": "error", "pairs": [pair]}, Path("/[red]"))
    text = out.getvalue()
    assert "[host:port, ...]" in text and "x[bold] = 1" in text and "see [red]" in text
    assert "report: /[red]/report.html" in text


def test_an_error_message_keeps_its_brackets_on_the_terminal(tmp_path: Path) -> None:
    missing = tmp_path / "[red]inventory.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "audit", "run", "-i", str(missing), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "[red]inventory.yaml" in done.stderr, done.stderr


def test_a_verification_is_printed_in_source_and_target_words() -> None:
    from audit.verify import in_verification_prose, in_verification_terms

    pair = {
        **_pair("migration", {"keys_compared": 48}),
        "status": "error",
        "not_covered": ["migration replica 10.0.0.6:6379 unreachable: a read only replica said no"],
        "skipped_checks": {"replication": "check_replication: false"},
        "gate": {
            "failed": [
                {
                    "column": "missing_on_replica",
                    "observed": 2,
                    "threshold": 0,
                    "meaning": "Keys present on the master are missing on the replica.",
                }
            ]
        },
    }
    summary = {"run_id": "r", "verdict": "error", "pairs": [pair]}
    out = io.StringIO()
    print_summary(Console(file=out, width=300), summary, Path("/run"), in_verification_prose, in_verification_terms)
    text = out.getvalue()
    assert "Keys present on the source are missing on the target." in text
    assert "migration target 10.0.0.6:6379 unreachable: a read only replica said no" in text  # the server's words kept
    assert "skipped replication: a verification compares content only" in text
    assert "check_replication" not in text
    out = io.StringIO()
    print_summary(Console(file=out, width=300), summary, Path("/run"))  # an audit keeps its own words
    assert "missing on the replica." in out.getvalue() and "check_replication: false" in out.getvalue()
