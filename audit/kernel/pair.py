"""What every pair of the inventory has, whatever its kind: a name, a kind, the gate, check_replication.

Each kind declares its own pair model in its package (``class RedisPair(PairBase)``) with its
endpoints, its settings model and anything else it takes; the inventory validates a pair with the
model of its `kind` (a discriminated union), so an error names the pair and the field.

The gate's thresholds are one per finding category (``max_<category>``, with the short names
``max_missing`` and ``max_extra`` kept for the keyspace), generated from audit/findings.py so a new
category is gated without touching this file, plus the non-count thresholds declared below.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, create_model

from audit import defaults
from audit.findings import CATEGORIES, default_threshold

CATEGORY_ALIASES = {"max_missing": "missing_on_replica", "max_extra": "extra_on_replica"}
"""Short gate names for two keyspace categories; every other threshold is ``max_<category>``."""
_NON_CATEGORY = ("max_lag_bytes", "max_lag_seconds", "max_uncovered", "max_in_flight")


class Strict(BaseModel):
    """Unknown keys are rejected, so a typo never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _GateBase(Strict):
    """Thresholds: a pair passes when every count is at most its threshold (None: not gated)."""

    max_lag_bytes: int | None = Field(defaults.MAX_LAG_BYTES, ge=0)
    max_lag_seconds: float | None = Field(defaults.MAX_LAG_SECONDS, ge=0)
    max_uncovered: int = Field(0, ge=0, description="what could not be read or compared; 0 means full coverage")
    max_in_flight: int | None = Field(
        None, ge=0, description="keys still changing on the master when re-checked (not judged); not gated by default"
    )

    def category_limits(self) -> dict[str, int | None]:
        """Threshold per finding category."""
        limits: dict[str, int | None] = {}
        for name, value in self.model_dump().items():
            if name not in _NON_CATEGORY:
                limits[CATEGORY_ALIASES.get(name, name.removeprefix("max_"))] = value
        return limits

    if TYPE_CHECKING:  # the per-category fields are generated below

        def __getattr__(self, name: str) -> int | None: ...


def _gate_field_name(category: str) -> str:
    short = {v: k for k, v in CATEGORY_ALIASES.items()}
    return short.get(category, f"max_{category}")


_fields: dict[str, Any] = {_gate_field_name(c): (int | None, Field(default_threshold(c), ge=0)) for c in CATEGORIES}

if TYPE_CHECKING:

    class Gate(_GateBase): ...

else:
    Gate = create_model("Gate", __base__=_GateBase, __doc__=_GateBase.__doc__, **_fields)


def gate_field_names() -> list[str]:
    return list(Gate.model_fields)


def suite_parameter(field_name: str) -> str:
    """The suite parameter a `gate:` key sets (``max_missing`` -> ``max_missing_on_replica``)."""
    category = CATEGORY_ALIASES.get(field_name)
    return f"max_{category}" if category else field_name


def gate_fields_of(parameters: frozenset[str] | None) -> list[str]:
    """The `gate:` keys a suite reading `parameters` uses (every key when the suite is unknown: None)."""
    return [f for f in gate_field_names() if parameters is None or suite_parameter(f) in parameters]


class PairBase(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    kind: str
    check_replication: bool = Field(True, description="false for two independent systems (post-migration)")
    gate: Gate = Field(default_factory=Gate)
    settings: Strict = Field(default_factory=Strict)
    master: Any = None
    replica: Any = None

    def display_endpoint(self, side: str) -> str:
        """What summaries and reports may show of a side's endpoint: never a secret."""
        return display_endpoint(getattr(self, side))


def display_endpoint(value: Any) -> str:
    from audit.urls import redact_url

    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return redact_url(value.get_secret_value())
    if isinstance(value, BaseModel):
        shown = getattr(value, "display", None)
        if callable(shown):
            return str(shown())
        value = value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return json.dumps({k: v for k, v in value.items() if "pass" not in k.lower()}, sort_keys=True, default=str)
    return redact_url(str(value))
