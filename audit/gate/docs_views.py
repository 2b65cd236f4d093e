"""The Data Docs views of the gate's site: GX's own page views, with their compiled templates kept.

GX builds a Data Docs site with a new jinja2 Environment per page view at every build, so every gate
compiled the same few dozen templates again: about a third of a one-row gate's time. The site's config
(`audit/gate/gx.py`, `_site`) names these views instead of GX's defaults (GX's documented way to choose a
site's views). They differ from GX's in one thing: their Environment has a bytecode cache, a directory
the gate sets once it knows its context (:func:`use_cache_dir`, `OUT/gx/.jinja_cache`), so only the
first gate of a context compiles. jinja2 keys each cached template by its name and a checksum of its
source and ignores bytecode written by another Python version, so a GX upgrade recompiles what changed.
Before a directory is set (a context opened by some other program), the cache is this process's memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import jinja2.bccache
from great_expectations.render.view.view import DefaultJinjaIndexPageView, DefaultJinjaPageView


class _MemoryCache(jinja2.BytecodeCache):
    """Compiled templates in this process's memory."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_cache: jinja2.BytecodeCache = _MemoryCache()


def use_cache_dir(directory: Path) -> None:
    """Keep compiled templates in `directory` from now on (created when missing)."""
    global _cache
    directory.mkdir(parents=True, exist_ok=True)
    _cache = jinja2.FileSystemBytecodeCache(str(directory))


class _KeepsCompiledTemplates:
    """Mixed in before a GX view: its Environment, once built, gets the shared bytecode cache."""

    env: jinja2.Environment

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = _cache


class CachedPageView(_KeepsCompiledTemplates, DefaultJinjaPageView):  # type: ignore[misc]
    """GX's page view (a validation result, an expectation suite) with the shared bytecode cache."""


class CachedIndexPageView(_KeepsCompiledTemplates, DefaultJinjaIndexPageView):  # type: ignore[misc]
    """GX's index page view with the shared bytecode cache."""
