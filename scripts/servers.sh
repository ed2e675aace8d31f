# Servers the tests need, started privately for one run and stopped when the shell exits.
# Sourced by scripts/test and scripts/with-servers; `start_servers` (`start_redis`, `start_postgres`)
# exports the URLs the tests read.
#   OVOS_MEMORY_REDIS_URL     a redis-server on a free port (or $OVOS_MEMORY_REDIS_PORT) in a temporary
#                             folder: two runs on one machine never share or wait for one server
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
  local redis_pid=""
  redis_pid=$(cat "$_SERVERS_DIR/redis.pid" 2>/dev/null) || true
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true
  bash scripts/llm-server stop "$_SERVERS_DIR" || true
  # The servers may still write in the folder while they shut down (a log line, a file): wait for
  # redis to exit, then retry the removal. This runs in an EXIT trap under `set -e`, so nothing here
  # may fail: a leftover temporary folder must not turn a green run red.
  local _
  for _ in $(seq 50); do
    { [ -n "$redis_pid" ] && kill -0 "$redis_pid" 2>/dev/null; } || break
    sleep 0.1
  done
  for _ in 1 2 3 4 5; do
    rm -rf "$_SERVERS_DIR" 2>/dev/null && break
    sleep 1
  done
  [ ! -e "$_SERVERS_DIR" ] || echo "servers.sh: could not remove $_SERVERS_DIR (left behind)" >&2
  _SERVERS_DIR=""
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether the server answering on port $1 is the one started here (not another run's, on a port
# given twice): it reports the process id our redis-server wrote to its pid file.
_redis_is_ours() {
  local pid
  pid=$(cat "$_SERVERS_DIR/redis.pid" 2>/dev/null) && [ -n "$pid" ] &&
    redis-cli -p "$1" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"
}

start_servers() {
  start_redis
  start_postgres
}

start_redis() {
  [ -n "$_SERVERS_DIR" ] || _SERVERS_DIR=$(mktemp -d)
  trap stop_servers EXIT
  local port=${OVOS_MEMORY_REDIS_PORT:-$(free_port)}
  redis-server --port "$port" --bind 127.0.0.1 --dir "$_SERVERS_DIR" --save "" --appendonly no \
    --daemonize yes --pidfile "$_SERVERS_DIR/redis.pid" --logfile "$_SERVERS_DIR/redis.log"
  for _ in $(seq 50); do _redis_is_ours "$port" && break; sleep 0.1; done
  if ! _redis_is_ours "$port"; then
    echo "servers.sh: redis-server did not start on port $port:" >&2
    cat "$_SERVERS_DIR/redis.log" >&2 2>/dev/null || true
    return 1
  fi
  export OVOS_MEMORY_REDIS_URL="redis://127.0.0.1:$port/0"
}

start_postgres() {
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
  port=$(free_port)
  OVOS_MEMORY_TEST_LLM_URL=$(bash scripts/llm-server start "$port" "$_SERVERS_DIR")
  export OVOS_MEMORY_TEST_LLM_URL
}
