#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages, Java 17, a private venv with the
# pinned Python stack (constraints.txt), the project and its Airflow provider installed editable.
# One line per step; what the installers print goes to $VENV/setup.log (its tail is shown on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
PROVIDER=providers/replica-audit

say() { printf 'setup: %s\n' "$*"; }
fail() {
  say "FAILED: $1; the last lines of $LOG:" >&2
  tail -n 40 "$LOG" >&2 || true
  exit 1
}
mkdir -p "$VENV"
LOG=$VENV/setup.log
: >"$LOG"

# 1. System packages
need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v mariadbd >/dev/null || command -v mysqld >/dev/null || need_apt+=(mariadb-server)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need_apt+=(chromium)  # report tests
if ! java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then need_apt+=(openjdk-17-jre-headless); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  say "system packages: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"; } \
    >>"$LOG" 2>&1 || fail "apt-get install ${need_apt[*]}"
else
  say "system packages: present (redis-server, mariadb, chromium, Java 17+)"
fi

# 2. The venv
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >>"$LOG" 2>&1 || fail "$PY -m venv $VENV"
  say "venv: created $VENV"
else
  say "venv: $VENV"
fi

# 3. Python packages, pinned; the project and the provider editable (no PYTHONPATH, no plugins folder)
stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ] \
   || [ "$PROVIDER/pyproject.toml" -nt "$stamp" ]; then
  say "Python packages: installing (pinned by constraints.txt; details in $LOG)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >>"$LOG" 2>&1 || fail "pip upgrade"
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[airflow,dev,connect]" -e "$PROVIDER" >>"$LOG" 2>&1 \
    || fail "pip install"
  touch "$stamp"
else
  say "Python packages: up to date"
fi

# 4. What is installed, read from the packages' metadata (importing Airflow or GX would take seconds and print)
"$VENV/bin/python" - <<'EOF' || fail "the installed packages are incomplete"
from importlib.metadata import PackageNotFoundError, version

names = ("replica-audit", "airflow-provider-replica-audit", "apache-airflow", "pyspark", "great-expectations",
         "redis", "hiredis", "grpcio-status")
try:
    found = [f"{n} {version(n)}" for n in names]
except PackageNotFoundError as e:
    raise SystemExit(f"setup: {e.name} is not installed")
print("setup: ok:", ", ".join(found))
EOF

# 5. The Spark driver JVM's class-data-sharing archive (audit/diff/class_cache.py): a fresh JVM then maps
#    Spark's classes instead of loading them. Built once per JDK and Spark (about 40 s); without it runs
#    only start slower, so a failure here does not fail the setup.
"$VENV/bin/python" -m audit.diff.build_class_cache | sed 's/^/setup: /' || true
