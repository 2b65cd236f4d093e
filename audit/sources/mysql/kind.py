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
from typing import TYPE_CHECKING

from audit.kernel.kind import ConnKind, KindSpec
from audit.sources.mysql.endpoint import URL_HELP, connection_url_options
from audit.sources.mysql.model import MySQLPair

if TYPE_CHECKING:
    from audit.kernel.check import Check


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
        name: ConnKind("server", "mysql", 3306, with_schema=True, url_options=connection_url_options)
        for name in ("replica_audit_mysql", "mysql", "mariadb")  # its own type, then the official providers'
    },
)
