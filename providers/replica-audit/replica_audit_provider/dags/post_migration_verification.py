"""
### post_migration_verification

Verifies a migration: the **target** must hold what the **source** holds (a Redis or Pika keyspace,
MySQL/MariaDB tables). Trigger it with the form (Params below, validated before the run starts). The
two servers are audited as one pair, **snapshot → diff → recheck → gate**, without a replication
check (the target is not a replica), over every db either side has keys in (or the `dbs` given; Pika:
db 0 unless `dbs` names them; for MySQL every base table outside the system schemas, or the `tables`
given), then **certificate** writes `out/<run_id>/certificate.json` and `certificate.html`: what each
side holds (keys per db, or rows per table), the content digests of both sides, tool and server
versions, the gate's verdict.

Strictness: `zero_tolerance` (default: every threshold 0, unreadable keys included, and the two
content digests must be equal), `allow_ttl_drift` (expiry differences reported, not failing),
`allow_extra_on_target` (keys only on the target reported, not failing). The run fails unless the
certificate's verdict is `passed`.

`source` / `target`: `redis://[user:password@]host:port` (Pika too), `mysql://user:password@host:port`,
or `conn:<airflow_conn_id>`, which keeps the password in an Airflow connection (type
`replica_audit_redis`, `replica_audit_pika` or `replica_audit_mysql`); for a Redis Cluster or Sentinel,
the endpoint as a mapping, e.g. `{url: redis://host:7000, topology: cluster}`. `options`: other fields
of the pair, e.g. `{"compare": "keys", "keys": {"include": ["user:*"]}}`.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule

from audit.verify import DEFAULT_NAME, DEFAULT_STRICTNESS, STRICTNESS, verifiable_kinds
from replica_audit_provider.dags.arguments import dag_arguments
from replica_audit_provider.dags.templates import text
from replica_audit_provider.operators import (
    SOURCE_RETRY_ARGS,
    STAGES,
    AuditStageOperator,
    VerificationCertificateOperator,
)

ENDPOINT = r"^(conn:[A-Za-z0-9_.-]+|(rediss?|unix|mysql|mariadb)://\S+|\{.*\})$"
OUT = text("params.out")
RUN_ID = text("run_id")
VERIFICATION = {  # the arguments of audit.verify.verification_inventory, rendered from the Params
    "source": text("params.source"),
    "target": text("params.target"),
    "kind": text("params.kind"),
    "strictness": text("params.strictness"),
    "dbs": "{{ params.dbs }}",
    "tables": "{{ params.tables }}",
    "name": text("params.name"),
    "settings": "{{ params.settings }}",
    "options": "{{ params.options }}",
}


def _params() -> dict[str, Param]:
    return {
        "source": Param(
            type="string",
            pattern=ENDPOINT,
            title="Source",
            description="where the data came from: redis://host:port, mysql://user@host:port or conn:<airflow_conn_id>",
        ),
        "target": Param(
            type="string",
            pattern=ENDPOINT,
            title="Target",
            description="where it was migrated to: redis://host:port, mysql://user@host:port or conn:<airflow_conn_id>",
        ),
        "kind": Param("redis", type="string", enum=verifiable_kinds(), title="Kind"),
        "strictness": Param(
            DEFAULT_STRICTNESS,
            type="string",
            enum=list(STRICTNESS),
            title="Strictness",
            description="; ".join(f"{k}: {why}" for k, (_, why) in STRICTNESS.items()),
        ),
        "dbs": Param(
            [],
            type="array",
            items={"type": "integer", "minimum": 0, "maximum": 65535},
            title="Databases",
            description="db indexes to verify; empty: every db either side has keys in (Pika: db 0 only)",
        ),
        "tables": Param(
            [],
            type="array",
            items={"type": "string"},
            title="Tables",
            description="MySQL: schema.table or schema.* to verify; empty: every base table outside the system schemas",
        ),
        "name": Param(
            DEFAULT_NAME,
            type="string",
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
            title="Name",
            description="the pair's name in the outputs",
        ),
        "out": Param(
            os.environ.get(
                "REPLICA_AUDIT_VERIFY_OUT",
                os.path.join(os.environ.get("REPLICA_AUDIT_OUT", "/opt/replica-audit/out"), "verifications"),
            ),
            type="string",
            title="Output directory",
            description="each run writes out/<run_id>/",
        ),
        "settings": Param(
            {},
            type="object",
            title="Settings",
            description='inventory settings, e.g. {"max_keys_per_s": 5000, "recheck_rounds": 3}',
        ),
        "options": Param(
            {},
            type="object",
            title="Pair options",
            description='other fields of the pair, e.g. {"compare": "length", "keys": {"include": ["user:*"]}}',
        ),
    }


def post_migration_verification_dag(dag_id: str = "post_migration_verification", **dag_kwargs: Any) -> DAG:
    """The verification DAG (manual, with a trigger form); `dag_kwargs` override the DAG's arguments."""
    kwargs: dict[str, Any] = {
        "doc_md": __doc__,
        "schedule": None,
        "catchup": False,
        "render_template_as_native_obj": True,  # dbs and settings stay a list and a dict
        "tags": ["replica-audit", "verification"],
        "default_args": SOURCE_RETRY_ARGS,
        "params": _params(),
    }
    with DAG(dag_id=dag_id, **dag_arguments(kwargs, dag_kwargs)) as dag:
        stages = [
            AuditStageOperator(
                task_id=stage, stage=stage, pair=text("params.name"), inventory=VERIFICATION, out_dir=OUT, run_id=RUN_ID
            )
            for stage in STAGES
        ]
        certificate = VerificationCertificateOperator(
            task_id="certificate",
            verification=VERIFICATION,
            out_dir=OUT,
            run_id=RUN_ID,
            trigger_rule=TriggerRule.ALL_DONE,
            retries=0,
        )
        stages[0] >> stages[1] >> stages[2] >> stages[3] >> certificate
    return dag
