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
from urllib.parse import SplitResult, unquote, urlsplit

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
        return checked_url(resolver(raw[len("conn:") :]))
    return checked_url(raw)


def checked_url(raw: str) -> str:
    """`raw`, once its user info and port parse as typed: a client library would otherwise read a password
    with an unencoded "/" as the host and its first part as the port, and say so in an error message."""
    _, sep, rest = raw.partition("://")
    if not sep:
        return raw  # a path (a RocketMQ store) or a bare host
    try:
        parts = urlsplit(raw)
    except ValueError as e:  # an unbalanced "[" of an IPv6 address
        raise ConfigError(f"{redact_url(raw)}: not a URL ({e})") from None
    port_ok = _port_parses(parts)
    userinfo = rest.rpartition("@")[0]
    if any(c in userinfo for c in "/?#") and ("@" not in parts.netloc or not port_ok):
        raise ConfigError(
            f"{redact_url(raw)}: the user or password holds an unencoded '/', '?' or '#'; "
            "percent-encode them (%2F, %3F, %23)"
        )
    if not port_ok:
        raise ConfigError(
            f"{redact_url(raw)}: the port must be a number from 1 to 65535 (leave it out for the default)"
        )
    return raw


def _port_parses(parts: SplitResult) -> bool:
    """Port 0 parses too, but no server listens there: the clients took it as "no port" and audited
    the kind's default port instead, a server nobody named."""
    try:
        return parts.port != 0  # a property that raises ValueError unless the port is a number in 0-65535
    except ValueError:
        return False


_PASSWORD_RE = re.compile(r"(?:(?<=[:/])|^(?=[^:/@]*:[^/]))[^:/@]*:[^@]*@")
"""`user:pw@` after a ":" or "/" (`redis:/:pw@h`, a scheme typed with one slash) or at the start (`u:pw@h:3306`,
a URL whose scheme was left out: AIRFLOW_CONN_<ID> so written was shown whole)."""


_SECRET_KEYS = ("pass", "secret", "token")


def url_secrets(text: str) -> list[str]:
    """The passwords in `text`: of every URL written in it (as typed, percent-decoded, and with its user info
    as `://user:pw@`, long enough for a masker even when the password is short), and the values of password-like keys
    when `text` is a YAML/JSON mapping (an endpoint written as `{sentinels: ..., password: ...}`).

    For a secrets masker: a value that holds endpoints is shown only once each of these is masked.
    """
    found: list[str] = []
    for start in (m.end() for m in re.finditer("://", text)):
        # the user info ends at the last "@" before the address's first "/" (an unencoded "/" in a
        # password is refused anyway: audit.urls.checked_url) or its first blank
        authority = re.split(r"[/\s]", text[start:], maxsplit=1)[0]
        userinfo = authority.rpartition("@")[0]
        password = userinfo.partition(":")[2]
        if password:
            found.extend((password, unquote(password), f"://{userinfo}@"))
        query = re.split(r"\s", text[start:], maxsplit=1)[0].partition("?")[2]
        for name, value in (p.partition("=")[::2] for p in query.split("&")):
            if any(word in name.lower() for word in _SECRET_KEYS) and value:
                found.extend((value, unquote(value)))
    if text.lstrip().startswith("{"):
        found.extend(_mapping_secrets(text))
    return list(dict.fromkeys(found))


def _mapping_secrets(text: str) -> list[str]:
    import yaml

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if any(word in str(key).lower() for word in _SECRET_KEYS) and item not in (None, ""):
                    found.append(str(item))
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(loaded)
    return found


def shown_server_url(url: str | None) -> str:
    """What a message about a server endpoint shows: :func:`redact_url`'s form, or a placeholder for a value
    with no `scheme://` at all. The inventory refuses those before any message, so one comes of a `conn:<id>`
    whose value is not a URL: a password pasted into AIRFLOW_CONN_<ID>, or a secret manager's key that
    holds just the password."""
    if not url or "://" in url:
        return redact_url(url)
    return "(a value that is not a URL; not shown: it may be a secret)"


def redact_url(url: str | None) -> str:
    """`redis://user:secret@h:1/0` -> `redis://user:***@h:1/0`; never returns a password. A Spark Connect
    URL loses its parameters: `sc://h:15002/;user_id=u;token=secret` -> `sc://h:15002`."""
    if not url:
        return ""
    if url.startswith("conn:"):
        return url
    if url.startswith("sc://"):  # Spark Connect: the secret is a parameter after the address (`;token=...`)
        return url.split(";", 1)[0].rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _PASSWORD_RE.sub("***@", url)
    if "@" not in rest:  # no user info, but a query may still hold one (redis-py reads `?password=`)
        return f"{scheme}://{re.split(r'[?#]', rest, maxsplit=1)[0]}"
    # The last "@" ends the user info: a password typed with an unencoded "/", "?" or "#" would otherwise
    # be parsed as the path, query or fragment, and shown. The query goes too (it may hold a secret).
    userinfo, _, tail = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{re.split(r'[?#]', tail, maxsplit=1)[0]}"
