"""Kind `mysql`: MySQL and MariaDB tables row by row, and the replication state as GTID sets.

- name: shop-db
  kind: mysql
  master: mysql://auditor:${PASSWORD}@10.0.0.9:3306     # or conn:<id>
  replica: mysql://auditor:${PASSWORD}@10.0.0.10:3306
  tables: [shop.orders, "shop.*"]     # default: every base table outside the system schemas
  gate: {max_missing_row: 0, max_row_mismatch: 0, max_errant_gtid: 0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr

from audit.connections import ConnKind
from audit.errors import ConfigError
from audit.kernel.kind import KindSpec
from audit.kernel.pair import PairBase
from audit.sources.mysql.endpoint import URL_HELP, MySQLSettings, parse_tables

if TYPE_CHECKING:
    from audit.kernel.check import Check

_SCHEMES = ("mysql://", "mariadb://", "conn:")


def _mysql_url(value: SecretStr) -> SecretStr:
    if not value.get_secret_value().startswith(_SCHEMES):
        raise ValueError(f"expected {URL_HELP}, or conn:<airflow_conn_id>")
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


def checks(pair: MySQLPair) -> Sequence[Check]:
    from audit.sources.mysql.gtid_check import GtidCheck
    from audit.sources.mysql.rows_check import RowsCheck

    return [GtidCheck(pair), RowsCheck(pair)]


KIND = KindSpec(
    name="mysql",
    pair_model=MySQLPair,
    checks=checks,
    suite="mysql.json",
    endpoint_help=f"{URL_HELP}, or conn:<airflow_conn_id>",
    verifiable=True,
    connection_types={
        "replica_audit_mysql": ConnKind("server", "mysql", 3306, with_schema=True),
        "mysql": ConnKind("server", "mysql", 3306, with_schema=True),  # the official providers' types
        "mariadb": ConnKind("server", "mysql", 3306, with_schema=True),
    },
)
