# Servers the tests need, started privately for one run and stopped when the shell exits.
# Sourced by scripts/test and scripts/with-servers; `start_servers` exports the URLs the tests read.
#   OVOS_MEMORY_REDIS_URL     a redis-server on a free port in a temporary folder
#   OVOS_MEMORY_POSTGRES_URL  a PostgreSQL 16 with pgvector (the pgserver wheel) on a Unix socket in a
#                             temporary folder (scripts/postgres_server.py; a watchdog stops it even if
#                             this shell is killed). Needs a Python with pgserver: $OVOS_MEMORY_SERVERS_PYTHON,
#                             else .venv/bin/python.
# and, after them, `start_llm_server`:
#   OVOS_MEMORY_TEST_LLM_URL  a real local model (scripts/llm-server) on a free port; the `-m llm` tests
#                             and benchmarks/llm_eval.py use it. A URL already set is used as it is.

_SERVERS_DIR=""
_PG_DIR=""

stop_servers() {
  if [ -n "$_PG_DIR" ]; then "${_PG_PYTHON}" scripts/postgres_server.py stop "$_PG_DIR" || true; _PG_DIR=""; fi
  [ -n "$_SERVERS_DIR" ] || return 0
  if [ -f "$_SERVERS_DIR/redis.pid" ]; then kill "$(cat "$_SERVERS_DIR/redis.pid")" 2>/dev/null || true; fi
  bash scripts/llm-server stop "$_SERVERS_DIR" || true
  rm -rf "$_SERVERS_DIR"
  _SERVERS_DIR=""
}

start_servers() {
  _SERVERS_DIR=$(mktemp -d)
  trap stop_servers EXIT
  local port=${OVOS_MEMORY_REDIS_PORT:-6391}
  redis-server --port "$port" --bind 127.0.0.1 --dir "$_SERVERS_DIR" --save "" --appendonly no \
    --daemonize yes --pidfile "$_SERVERS_DIR/redis.pid" --logfile "$_SERVERS_DIR/redis.log"
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export OVOS_MEMORY_REDIS_URL="redis://127.0.0.1:$port/0"

  _PG_PYTHON=${OVOS_MEMORY_SERVERS_PYTHON:-.venv/bin/python}
  local env
  env=$("$_PG_PYTHON" scripts/postgres_server.py start --owner $$ --print-env)
  eval "$env"
  _PG_DIR=$OVOS_MEMORY_PGSERVER_DIR
  export OVOS_MEMORY_POSTGRES_URL
}

start_llm_server() {
  [ -z "${OVOS_MEMORY_TEST_LLM_URL:-}" ] || return 0
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  OVOS_MEMORY_TEST_LLM_URL=$(bash scripts/llm-server start "$port" "$_SERVERS_DIR")
  export OVOS_MEMORY_TEST_LLM_URL
}
