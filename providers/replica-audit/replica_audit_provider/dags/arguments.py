"""The DAG factories' arguments: defaults from the environment, and a user's keywords merged into them."""

from __future__ import annotations

import os
from typing import Any

MERGED = ("params", "default_args")
"""Arguments a factory's keywords are merged into, key by key: `params={"inventory": ...}` keeps the other
Params, `default_args={"owner": ...}` keeps the retry policy. Any other keyword replaces the default."""


def dag_arguments(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`defaults` with `given` applied: MERGED arguments key by key, the others replaced."""
    merged = {**defaults, **given}
    for name in MERGED:
        if isinstance(defaults.get(name), dict) and isinstance(given.get(name), dict):
            merged[name] = {**defaults[name], **given[name]}
    return merged


def schedule_from_env(variable: str, default: str) -> str | None:
    """The DAG's schedule: `variable` when set, `none` (or empty) for no schedule, else `default`."""
    value = os.environ.get(variable)
    if value is None:
        return default
    value = value.strip()
    return None if value.lower() in ("", "none", "null") else value
