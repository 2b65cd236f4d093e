"""Dropping the rows of deleted results from the Data Docs index, without Great Expectations (prune).

The index (`OUT/gx/data_docs/index.html`) is rendered by GX's DefaultSiteIndexBuilder through GX's
templates (audit/gate/docs_views.py): rebuilding it takes GX (seconds of import) and the context. A
prune only deletes results, so it only has to take rows out: the index's tables are bootstrap-table
data written by GX's template as one line each, `data: [...],`, the Python literal of the rows (the
template prints the list of rows as Jinja does, with str()). A row whose linked page
(`_table_row_link_path`, under `validations/`) no longer exists is dropped; nothing else of the file
changes. The caller holds the GX context's lock (audit/prune.py), so no gate writes the index meanwhile.

A line is rewritten only when it reads back exactly as written (`repr(literal_eval(line)) == line`),
so a GX that writes its index otherwise leaves it as it is: the next gate rebuilds it in full then.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote

from audit.layout import write_text

INDEX = "index.html"
_DATA = re.compile(r"(?P<lead>\s*data: )(?P<rows>\[.*\]),")


def drop_dead_rows(site: Path) -> int | None:
    """Drop the index's rows whose validation page under `site` is gone; how many were dropped, or None
    when the index is not in the form described above (it is then left as it is). No index: 0."""
    index = site / INDEX
    try:
        lines = index.read_text(encoding="utf-8").split("\n")  # "\n" alone: every other byte stays as it is
    except FileNotFoundError:
        return 0
    dropped = 0
    for n, line in enumerate(lines):
        found = _DATA.fullmatch(line)
        if found is None:
            continue
        rows = _rows(found["rows"])
        if rows is None:
            return None
        kept = [row for row in rows if not _dead(site, row)]
        if len(kept) < len(rows):
            lines[n] = f"{found['lead']}{kept!r},"
            dropped += len(rows) - len(kept)
    if dropped:
        write_text(index, "\n".join(lines))  # atomic: a reader sees the old index or the new one
    return dropped


def _rows(text: str) -> list[dict[str, Any]] | None:
    """The rows of a `data:` line; None unless they are a list of dicts that reads back as written."""
    try:
        rows = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows) or repr(rows) != text:
        return None
    return rows


def _dead(site: Path, row: dict[str, Any]) -> bool:
    """Whether the row links a validation page under `site` that is not there."""
    link = row.get("_table_row_link_path")
    if not isinstance(link, str) or not link.startswith("validations/"):
        return False  # a suite's page, or a row of another kind: kept
    path = PurePosixPath(unquote(link))
    if ".." in path.parts:
        return False
    return not (site / path).is_file()
