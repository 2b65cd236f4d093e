#!/usr/bin/env bash
# `airflow standalone` with replica-audit's DAGs (the provider installed by `make setup` brings the rest): the Airflow UI on http://127.0.0.1:8080
# (AIRFLOW__API__PORT / AIRFLOW__API__HOST to change it), a scheduler, a DAG processor and a triggerer,
# in one process tree.
#
#   scripts/standalone.sh                       # AIRFLOW_HOME=.airflow, outputs in .airflow/out
#   AIRFLOW_HOME=/srv/airflow scripts/standalone.sh
#
# Log in as `admin` with the password printed at start-up (also in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated). DAGs start paused; trigger
# post_migration_verification from its form, or unpause consistency_audit once REPLICA_AUDIT_INVENTORY
# names your inventory.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-$REPO/.venv}
if [ ! -x "$VENV/bin/airflow" ]; then
  echo "standalone: $VENV/bin/airflow not found; run \`make setup\` first" >&2
  exit 2
fi

export AIRFLOW_HOME=${AIRFLOW_HOME:-$REPO/.airflow}
# the UI/API on loopback unless told otherwise; task processes reach the execution API on the same port
export AIRFLOW__API__HOST=${AIRFLOW__API__HOST:-127.0.0.1}
export AIRFLOW__API__PORT=${AIRFLOW__API__PORT:-8080}
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-http://127.0.0.1:$AIRFLOW__API__PORT/execution/}
export AIRFLOW__CORE__DAGS_FOLDER=$REPO/dags
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export GX_ANALYTICS_ENABLED=${GX_ANALYTICS_ENABLED:-false}
# the DAGs' Param defaults: where runs write, which inventory the scheduled audit reads
export REPLICA_AUDIT_OUT=${REPLICA_AUDIT_OUT:-$AIRFLOW_HOME/out}
export REPLICA_AUDIT_INVENTORY=${REPLICA_AUDIT_INVENTORY:-$REPO/inventory.yaml}
mkdir -p "$AIRFLOW_HOME" "$REPLICA_AUDIT_OUT"
export PATH="$VENV/bin:$PATH"

echo "standalone: UI on http://$AIRFLOW__API__HOST:$AIRFLOW__API__PORT; AIRFLOW_HOME=$AIRFLOW_HOME;" \
     "DAGs from $AIRFLOW__CORE__DAGS_FOLDER; outputs in $REPLICA_AUDIT_OUT"
exec airflow standalone
