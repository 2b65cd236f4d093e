"""A kind: its pair model, its checks and its GX suite; and the registry that finds kinds.

Kinds are found, in order, in the built-in registry (audit/sources/__init__.py: kind -> module), in the
``replica_audit.kinds`` entry points of installed distributions, in ``REPLICA_AUDIT_KINDS``
(``name=module[:attribute];...``, for a kind that lives outside this package without being installed),
and in :func:`register_kind` calls. A kind module exposes ``KIND = KindSpec(...)``; it should import
only its pydantic models at import time (its checks lazily), since the inventory loads every kind to
validate pairs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from audit.errors import ConfigError

if TYPE_CHECKING:
    from audit.kernel.check import Check
    from audit.kernel.pair import PairBase

ENTRY_POINT_GROUP = "replica_audit.kinds"
ENV_VAR = "REPLICA_AUDIT_KINDS"


@dataclass(frozen=True, slots=True)
class ConnKind:
    family: str
    """`server` (a URL is built) or `store` (a path is read)."""
    scheme: str
    default_port: int
    with_schema: bool
    url_options: Callable[[str, Mapping[str, Any]], dict[str, str]] | None = None
    """(connection type, extra) -> the URL's query options (a server's TLS files, its timeouts)."""


@dataclass(frozen=True)
class KindSpec:
    name: str
    pair_model: type[PairBase]
    checks: Callable[[Any], Sequence[Check]]
    """The kind's checks for one pair, in the order the stages call them."""
    suite: str
    """File name in audit/expectations/ (or a path) of the GX suite that gates this kind."""
    endpoint_help: str = ""
    verifiable: bool = False
    """Whether a post-migration verification (two servers, no replication) can certify this kind."""
    uses_spark: bool = True
    """Whether its checks run Spark jobs (a run then starts the Spark session while the snapshots run)."""
    connection_types: Mapping[str, ConnKind] = field(default_factory=dict)
    """Airflow connection types a `conn:<id>` endpoint of this kind may be (audit/connections.py)."""


_extra: dict[str, KindSpec] = {}


def register_kind(spec: KindSpec) -> None:
    """Add a kind at run time (a test's own kind, a plugin loaded by hand)."""
    _extra[spec.name] = spec
    registered_kinds.cache_clear()


def _load(target: str) -> KindSpec:
    module, _, attr = target.partition(":")
    try:  # a registration (REPLICA_AUDIT_KINDS, an entry point) naming what is not there is a setting's mistake
        spec = getattr(import_module(module), attr or "KIND")
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"kind module {target}: cannot load it ({e})") from None
    if not isinstance(spec, KindSpec):
        raise ConfigError(f"kind module {target}: expected a KindSpec, got {type(spec).__name__}")
    return spec


def _from_env() -> dict[str, str]:
    """`name=module[:attribute]` items; one that is not that form is refused (it was skipped without a word,
    so a mistyped registration left its kind unknown, or the built-in one it meant to replace in use)."""
    found = {}
    for item in filter(str.strip, os.environ.get(ENV_VAR, "").split(";")):
        name, eq, target = (part.strip() for part in item.partition("="))
        if not (eq and name and target):
            raise ConfigError(f"{ENV_VAR}: {item.strip()!r}: expected name=module[:attribute] (items separated by ';')")
        found[name] = target
    return found


@cache
def registered_kinds() -> dict[str, KindSpec]:
    from audit.sources import BUILTIN_KINDS

    targets: dict[str, str] = dict(BUILTIN_KINDS)
    targets.update({ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)})
    targets.update(_from_env())
    kinds = {name: _load(target) for name, target in targets.items()}
    kinds.update(_extra)
    return kinds


def kind_spec(name: str) -> KindSpec:
    kinds = registered_kinds()
    try:
        return kinds[name]
    except KeyError:
        raise ConfigError(f"kind {name!r} is not known (known: {', '.join(kinds)})") from None
