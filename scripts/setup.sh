#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages, Java 17, a private venv with the
# pinned Python stack (constraints.txt), and the project installed editable.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v mariadbd >/dev/null || command -v mysqld >/dev/null || need_apt+=(mariadb-server)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need_apt+=(chromium)  # report tests
if ! java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then need_apt+=(openjdk-17-jre-headless); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  echo "setup: installing Python packages (pinned by constraints.txt)"
  "$VENV/bin/pip" install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/pip" install -q -c constraints.txt -e ".[airflow,dev]" 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -c "import pyspark, airflow, great_expectations, redis, hiredis" \
    || { echo "setup: Python packages failed to install" >&2; exit 1; }
  touch "$stamp"
fi
echo "setup: ok ($("$VENV/bin/python" -c 'import pyspark, airflow, great_expectations as gx; print("pyspark", pyspark.__version__, "airflow", airflow.__version__, "gx", gx.__version__)'))"
