"""Hooks: resolve `conn:<id>` inventory endpoints through Airflow connections (secrets stay in Airflow)."""

from __future__ import annotations

from airflow.sdk.bases.hook import BaseHook


class AuditSourceHook(BaseHook):
    """A Redis/Pika (redis://), MySQL (mysql://) or file-store connection, handed to replica-audit as a URL."""

    conn_name_attr = "audit_conn_id"
    default_conn_name = "replica_audit_default"
    conn_type = "generic"
    hook_name = "replica-audit source"

    def __init__(self, audit_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.audit_conn_id = audit_conn_id

    def get_conn(self) -> str:
        return self.get_connection(self.audit_conn_id).get_uri()


def airflow_conn_resolver(conn_id: str) -> str:
    """The `resolver` replica-audit's library takes: conn id -> URL."""
    return AuditSourceHook(conn_id).get_conn()
