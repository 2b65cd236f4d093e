"""An Airflow DAG of a user's own for the tests: it runs after the pair `dag-pair` was audited.

Scheduling on the pair's asset is what makes Airflow keep that asset (and so its events) active.
"""

from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from replica_audit_provider.assets import pair_asset

with DAG(dag_id="downstream_of_dag_pair", schedule=[pair_asset("dag-pair")], catchup=False, tags=["test"]) as dag:
    EmptyOperator(task_id="noop")
