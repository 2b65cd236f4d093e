"""Pure parsers for `INFO` and `CLIENT LIST` text (Redis and Pika formats)."""

from __future__ import annotations

import re
from typing import Any

_SLAVE_LINE = re.compile(r"^slave\d+$")


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def parse_info(raw: bytes | str) -> dict[str, Any]:
    """`INFO` text -> flat dict. `slaveN:ip=..,port=..` lines become dicts; `# Section` lines are dropped.

    Values stay strings except the `slaveN` fields and `dbN` keyspace lines, which are split into dicts.
    """
    out: dict[str, Any] = {}
    for line in _text(raw).splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        name, _, value = line.partition(":")
        if (_SLAVE_LINE.match(name) or re.match(r"^db\d+$", name)) and "=" in value:
            out[name] = dict(kv.split("=", 1) for kv in value.split(",") if "=" in kv)
        else:
            out[name] = value
    return out


def replicas_listed(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The `slaveN` entries of a master's INFO replication, in order, with numeric fields as ints."""
    rows = []
    for name in sorted((n for n in info if _SLAVE_LINE.match(n)), key=lambda n: int(n[5:])):
        entry = dict(info[name])
        for f in ("port", "offset", "lag"):
            if f in entry:
                try:
                    entry[f] = int(entry[f])
                except ValueError:
                    pass
        rows.append({"name": name, **entry})
    return rows


def keyspace_dbs(info: dict[str, Any]) -> dict[int, int]:
    """`db0:keys=3,expires=1,...` -> {0: 3}."""
    dbs = {}
    for name, value in info.items():
        if re.match(r"^db\d+$", name) and isinstance(value, dict) and "keys" in value:
            dbs[int(name[2:])] = int(value["keys"])
    return dbs


def parse_client_list(raw: bytes | str) -> list[dict[str, str]]:
    """`CLIENT LIST` text -> one dict per client (`id`, `addr`, `flags`, `cmd`, `idle`, ...)."""
    clients = []
    for line in _text(raw).splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        if fields:
            clients.append(fields)
    return clients


def as_int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
