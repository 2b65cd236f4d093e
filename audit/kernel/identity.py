"""One server given as both sides of a pair: refused before anything is compared.

A server compared with itself agrees on every key and row, so a pair whose two endpoints reach the same
server (a copied URL, a DNS name or a proxy that leads to the master, a verification whose `--target`
repeats `--source`) passed every check, and a verification certified it. Each kind reads what its
servers say identifies them (an id the server draws at its start, or a store's directory) where it first
connects, and hands them here; an identity a side does not give is no proof either way.
"""

from __future__ import annotations

from collections.abc import Mapping

from audit.errors import ConfigError


def refuse_one_server(pair: str, identities: Mapping[str, str | None], what: str) -> None:
    """ConfigError (exit 2) when every side gave the same identity; `what` names it (e.g. `run_id`)."""
    given = {identity for identity in identities.values() if identity}
    if len(identities) > 1 and len(given) == 1 and all(identities.values()):
        raise ConfigError(
            f"pair {pair}: both endpoints reach one server ({what} {given.pop()}): a server compared with "
            "itself agrees on everything; check the pair's endpoints"
        )
