"""The `mysql` pair as the inventory declares it: two server URLs, the tables, the settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr

from audit.errors import ConfigError
from audit.kernel.pair import PairBase
from audit.sources.mysql.endpoint import URL_HELP, MySQLEndpoint, MySQLSettings, parse_tables
from audit.urls import checked_url

_SCHEMES = ("mysql://", "mariadb://", "conn:")


def _mysql_url(value: SecretStr) -> SecretStr:
    url = value.get_secret_value()
    if not url.startswith(_SCHEMES):
        raise ValueError(f"expected {URL_HELP}, or conn:<airflow_conn_id>")
    if not url.startswith("conn:"):  # a connection is checked when it is resolved
        try:
            checked_url(url)  # first: an unencoded "/", "?" or "#" in a password is named as that, redacted
            MySQLEndpoint.from_url(url, "url", check_files=False)  # TLS files: on the host that connects
        except ConfigError as e:  # pydantic reports a ValueError under the pair's field
            raise ValueError(str(e).removeprefix("url: ")) from None
    return value


def _tables(value: list[str] | None) -> list[str] | None:
    try:
        parse_tables(value)
    except ConfigError as e:  # pydantic reports a ValueError under the pair's `tables` field
        raise ValueError(str(e)) from None
    return value


MySQLUrl = Annotated[SecretStr, AfterValidator(_mysql_url)]


class MySQLPair(PairBase):
    kind: Literal["mysql"]
    master: MySQLUrl
    replica: MySQLUrl
    tables: Annotated[list[str] | None, AfterValidator(_tables)] = Field(
        None, description="schema.table or globs (shop.*); default: every base table outside the system schemas"
    )
    settings: MySQLSettings = Field(default_factory=MySQLSettings)
