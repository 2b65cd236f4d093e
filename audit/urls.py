"""Server endpoint URLs: the real one for a client (:func:`endpoint_url`), the one anything may show
(:func:`redact_url`). A URL holds its password; nothing but a client ever gets the first.

`conn:<id>` endpoints are resolved by a :data:`ConnResolver`: Airflow's connections in the provider,
`AIRFLOW_CONN_<ID>` outside Airflow (:func:`audit.connections.env_conn_resolver`, which the pipeline
passes when it is given none).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from audit.errors import ConfigError

ConnResolver = Callable[[str], str]
"""Maps an Airflow connection id to a URL; the plugin passes one backed by Airflow's connections."""


def endpoint_url(value: Any, resolver: ConnResolver | None = None) -> str | None:
    """The real URL of a server endpoint (secret included): only hand it to a client, never print it."""
    if isinstance(value, SecretStr):
        raw = value.get_secret_value()
    elif isinstance(value, str):
        raw = value
    else:
        return None
    if raw.startswith("conn:"):
        if resolver is None:
            raise ConfigError(f"{raw}: no resolver for Airflow connections was given")
        return resolver(raw[len("conn:") :])
    return raw


_PASSWORD_RE = re.compile(r"(?<=[:/])[^:/@]*:[^@]*@")


def redact_url(url: str | None) -> str:
    """`redis://user:secret@h:1/0` -> `redis://user:***@h:1/0`; never returns a password. A Spark Connect
    URL loses its parameters: `sc://h:15002/;user_id=u;token=secret` -> `sc://h:15002`."""
    if not url:
        return ""
    if url.startswith("conn:"):
        return url
    if url.startswith("sc://"):  # Spark Connect: the secret is a parameter after the address (`;token=...`)
        return url.split(";", 1)[0].rstrip("/")
    try:
        parts = urlsplit(url)
    except ValueError:
        return _PASSWORD_RE.sub("***@", url)
    if parts.password is None and "@" not in parts.netloc:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number: show nothing rather than fail on a typo
        port = ""
    netloc = f"{user}:***@{host}{port}" if parts.password is not None else f"{user}@{host}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
