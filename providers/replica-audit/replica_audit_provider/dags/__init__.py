"""The replica-audit DAGs, as factories: a file in the Airflow DAGs folder calls one (see docs/airflow-provider.md).

# dags/consistency_audit.py: an Airflow DAG file
from replica_audit_provider.dags import consistency_audit_dag

dag = consistency_audit_dag()                      # or consistency_audit_dag(schedule="@daily", ...)
"""

from __future__ import annotations

from replica_audit_provider.dags.consistency_audit import consistency_audit_dag
from replica_audit_provider.dags.data_quality_report import data_quality_report_dag
from replica_audit_provider.dags.post_migration_verification import post_migration_verification_dag

__all__ = ["consistency_audit_dag", "data_quality_report_dag", "post_migration_verification_dag"]
