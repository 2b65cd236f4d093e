"""What Airflow's ProvidersManager reads through the `apache_airflow_provider` entry point.

The connection forms are declared here (`conn-fields`, `ui-field-behaviour`), as Airflow 3.2+ reads
them without importing the hooks; the hooks hold only the behaviour (`get_conn`, `test_connection`).
Form fields are stored in the connection's extra under their plain names (`tls`, `store_dir`, ...).
"""

from __future__ import annotations

from typing import Any

PACKAGE = "airflow-provider-replica-audit"
HOOKS_MODULE = "replica_audit_provider.hooks"
INTEGRATION = "replica-audit"

_TLS = {
    "tls": {
        "label": "TLS (rediss://)",
        "description": "Connect with TLS; the server certificate is verified against the system CAs.",
        "schema": {"type": ["boolean", "null"], "default": False},
    }
}


_MYSQL_TLS = {
    **{
        f"ssl_{part}": {
            "label": f"TLS {what}",
            "description": f"Path, on the workers, of the {what} (PEM); any of these turns TLS on.",
            "schema": {"type": ["string", "null"]},
        }
        for part, what in (("ca", "CA certificate"), ("cert", "client certificate"), ("key", "client key"))
    },
    "connect_timeout": {
        "label": "Connect timeout (s)",
        "description": "Seconds to wait for the server (default 5).",
        "schema": {"type": ["number", "null"], "exclusiveMinimum": 0},
    },
}
"""The audit's MySQL URL options (docs/mysql.md), stored in the extra as `ssl_ca`, ...: see
audit/sources/mysql/endpoint.py `connection_url_options`."""


def _server_behaviour(port: int, what: str) -> dict[str, Any]:
    return {
        "hidden-fields": ["schema"],
        "relabeling": {"login": "ACL user", "password": "Password"},
        "placeholders": {
            "host": "10.0.0.5",
            "port": str(port),
            "login": "auditor (optional: the default user when empty)",
            "password": f"the {what} password of that user",
            "extra": '{"tls": false}',
        },
    }


def _connection_types() -> list[dict[str, Any]]:
    return [
        {
            "connection-type": "replica_audit_redis",
            "hook-class-name": f"{HOOKS_MODULE}.RedisAuditHook",
            "hook-name": "Redis (replica-audit)",
            "conn-fields": _TLS,
            "ui-field-behaviour": _server_behaviour(6379, "Redis"),
        },
        {
            "connection-type": "replica_audit_pika",
            "hook-class-name": f"{HOOKS_MODULE}.PikaAuditHook",
            "hook-name": "Pika (replica-audit)",
            "conn-fields": _TLS,
            "ui-field-behaviour": _server_behaviour(9221, "Pika (requirepass / userpass)"),
        },
        {
            "connection-type": "replica_audit_mysql",
            "hook-class-name": f"{HOOKS_MODULE}.MySQLAuditHook",
            "hook-name": "MySQL / MariaDB (replica-audit)",
            "conn-fields": _MYSQL_TLS,
            "ui-field-behaviour": {
                "hidden-fields": [],
                "relabeling": {"schema": "Database (optional)", "login": "User"},
                "placeholders": {
                    "host": "10.0.0.7",
                    "port": "3306",
                    "schema": "shop",
                    "login": "auditor (SELECT, REPLICATION CLIENT)",
                    "password": "the auditor's password",
                },
            },
        },
        {
            "connection-type": "replica_audit_rocketmq",
            "hook-class-name": f"{HOOKS_MODULE}.RocketMQStoreHook",
            "hook-name": "RocketMQ store (replica-audit)",
            "conn-fields": {
                "store_dir": {
                    "label": "Store directory",
                    "description": "The broker's store root (holding commitlog/) or its commitlog directory; "
                    "`a;b` for several paths. It must be readable where the tasks run.",
                    "schema": {"type": "string", "minLength": 1},
                },
                "broker_log": {
                    "label": "Broker log",
                    "description": "broker.log or store.log of the master: the HA ack offsets are read from it.",
                    "schema": {"type": ["string", "null"]},
                },
                "ha_status": {
                    "label": "Saved haStatus",
                    "description": "A file holding `mqadmin haStatus` output.",
                    "schema": {"type": ["string", "null"]},
                },
                "broker_status": {
                    "label": "Saved brokerStatus",
                    "description": "A file holding `mqadmin brokerStatus` output: its commitLogMaxOffset is "
                    "recorded next to the files' end.",
                    "schema": {"type": ["string", "null"]},
                },
                "ha_addr": {
                    "label": "Slave HA address",
                    "description": "host:port of the slave's HA connection, to pick it among several.",
                    "schema": {"type": ["string", "null"]},
                },
            },
            "ui-field-behaviour": {
                "hidden-fields": ["host", "port", "schema", "login", "password"],
                "relabeling": {},
                "placeholders": {
                    "store_dir": "/data/rocketmq/store",
                    "broker_log": "/data/rocketmq/logs/broker.log",
                    "ha_status": "/tmp/ha-status.txt",
                    "broker_status": "/tmp/broker-status.txt",
                    "ha_addr": "10.0.0.9:10912",
                },
            },
        },
    ]


def get_provider_info() -> dict[str, Any]:
    from replica_audit_provider import __version__

    return {
        "package-name": PACKAGE,
        "name": "replica-audit",
        "description": "Audits whether replicas hold what their masters hold (Redis, Pika, RocketMQ, MySQL): "
        "connection types, hooks, operators, assets and DAGs for replica-audit.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "tags": ["service"],
            }
        ],
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["replica_audit_provider.operators"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": [HOOKS_MODULE]}],
        "connection-types": _connection_types(),
    }
