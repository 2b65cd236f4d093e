"""Moved to :mod:`replica_audit_provider.hooks`."""

from __future__ import annotations

from replica_audit_provider.hooks import MySQLAuditHook, RedisAuditHook, airflow_conn_resolver
from replica_audit_provider.hooks import RocketMQStoreHook as FileStoreAuditHook

__all__ = ["FileStoreAuditHook", "MySQLAuditHook", "RedisAuditHook", "airflow_conn_resolver"]
