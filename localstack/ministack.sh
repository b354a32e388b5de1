#!/usr/bin/env bash
# ministack.sh — install, start, stop, inspect and reset MiniStack, the local
# AWS emulator bulkrun's integration tests run against.
#
# Usage: bash localstack/ministack.sh install|start|stop|status|reset
#
#   install  create the repo's .venv (python3 -m venv) if missing and install
#            the MiniStack version pinned in localstack/requirements.txt.
#            Quick no-op when that version is already installed.
#   start    start MiniStack in the background and wait until it is healthy.
#            No-op (exit 0) when something already answers health on the port.
#            Installs first when .venv/bin/ministack is missing.
#   stop     stop the MiniStack this script started (its whole process group,
#            Lambda function processes included) and wait for the port to be
#            free. No-op when it is not running.
#   status   print the health JSON; exit 1 with "not running" otherwise.
#   reset    wipe all emulator state (POST /_ministack/reset).
#
# Environment:
#   BULKRUN_EMULATOR_PORT   port to serve on; default 4566.
#   BULKRUN_EMULATOR_START_TIMEOUT_SECONDS
#                           how long start waits for health; default 60.
#   BULKRUN_FAULT_PROXY     1: put the fault-injecting proxy
#                           (integration/testbed/cmd/faultproxy) on the port
#                           and MiniStack behind it on the inner port;
#                           MiniStack hands the proxy's URL to every
#                           function, so their AWS calls go through it too.
#                           Rules: POST /_faults on the port. Default 0.
#   BULKRUN_EMULATOR_INNER_PORT
#                           MiniStack's own port under BULKRUN_FAULT_PROXY=1;
#                           default the port + 10000.
#   BULKRUN_IAM_LANE        1 (with BULKRUN_FAULT_PROXY=1): the proxy checks
#                           every call of a bulkrun function against its role
#                           as the stack BULKRUN_IAM_STACK (default bulkrun)
#                           deployed it, and answers AccessDenied where AWS
#                           would (integration/testbed/iamlane; tools/iam
#                           must be installed: make tools). Report: GET /_iam on the
#                           port. BULKRUN_IAM_AUDIT=1 records denials only.
#                           Default 0.
#   BULKRUN_SQS_DELIVERY    how standard queues choose the messages of a
#                           receive: "shuffled" (default; at random among
#                           the visible ones, as SQS standard queues may) or
#                           "ordered" (MiniStack's own: oldest first). A
#                           queue tagged bulkrun:delivery=shuffled|ordered
#                           chooses for itself. See localstack/delivery.py.
#   BULKRUN_SQS_DELIVERY_SEED
#                           seeds the shuffled draws; default random.
#   BULKRUN_SQS_FAIR        0 turns off the fair queues "shuffled" applies
#                           to messages with a MessageGroupId (default 1).
#   BULKRUN_ESM_RAMP        0 turns off the SQS event sources' ramp (5
#                           batches in flight, 300 more a minute, as
#                           Lambda's; default 1). See localstack/esmscaling.py.
#
# State lives in .ministack/ at the repo root (git-ignored): ministack.log,
# ministack.pid, ministack.port, and tmp/, the emulator's own TMPDIR (it unpacks
# function code there), emptied on every start; with the proxy also
# faultproxy (the binary), faultproxy.log and faultproxy.pid. One instance
# per checkout.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
requirements="$script_dir/requirements.txt"
venv="$repo_root/.venv"
state_dir="$repo_root/.ministack"
log_file="$state_dir/ministack.log"
pid_file="$state_dir/ministack.pid"
port_file="$state_dir/ministack.port"
tmp_dir="$state_dir/tmp"
proxy_bin="$state_dir/faultproxy"
proxy_log="$state_dir/faultproxy.log"
proxy_pid_file="$state_dir/faultproxy.pid"

port="${BULKRUN_EMULATOR_PORT:-4566}"
fault_proxy="${BULKRUN_FAULT_PROXY:-0}"
inner_port="${BULKRUN_EMULATOR_INNER_PORT:-$((port + 10000))}"
iam_lane="${BULKRUN_IAM_LANE:-0}"
endpoint="http://localhost:$port"
health_url="$endpoint/_ministack/health"
start_timeout_seconds="${BULKRUN_EMULATOR_START_TIMEOUT_SECONDS:-60}"
stop_timeout_seconds=20

log() { printf 'ministack.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# pinned_version prints the version pinned in requirements.txt.
pinned_version() {
  sed -n 's/^ministack==\([^[:space:]#]*\).*/\1/p' "$requirements" | head -n 1
}

# installed_version prints the MiniStack version in .venv, or nothing.
installed_version() {
  [[ -x "$venv/bin/python" ]] || return 0
  "$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try:
    print(m.version("ministack"))
except m.PackageNotFoundError:
    pass
PY
}

# http METHOD URL: prints the body, returns 0 only on HTTP 200.
http() {
  local method=$1 url=$2
  if command -v curl >/dev/null 2>&1; then
    curl --silent --show-error --fail --max-time 5 -X "$method" "$url" 2>/dev/null
  else
    python3 - "$method" "$url" <<'PY' 2>/dev/null
import sys, urllib.request
req = urllib.request.Request(sys.argv[2], method=sys.argv[1], data=b"" if sys.argv[1] == "POST" else None)
with urllib.request.urlopen(req, timeout=5) as resp:
    sys.stdout.write(resp.read().decode())
    sys.exit(0 if resp.status == 200 else 1)
PY
  fi
}

healthy() { http GET "$health_url" >/dev/null; }

# port_open succeeds while anything accepts TCP connections on the port.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

read_pid() { [[ -f "$pid_file" ]] && tr -dc '0-9' <"$pid_file" || true; }

# running_port prints the port of the instance in the pid file (default: ours).
running_port() {
  local p=""
  [[ -f "$port_file" ]] && p=$(tr -dc '0-9' <"$port_file")
  echo "${p:-$port}"
}

# descendants PID prints every descendant of PID, deepest first.
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    descendants "$child"
    echo "$child"
  done
}

cmd_install() {
  local want have
  want=$(pinned_version)
  [[ -n "$want" ]] || die "no ministack==VERSION pin in $requirements"
  if [[ ! -x "$venv/bin/python" ]]; then
    log "creating virtualenv $venv"
    python3 -m venv "$venv"
  fi
  have=$(installed_version)
  # The stamp is the requirements file's content: a change of any pin (not
  # only ministack's) installs again.
  local stamp="$venv/.bulkrun-requirements"
  if [[ "$have" == "$want" && -x "$venv/bin/ministack" ]] && cmp -s "$requirements" "$stamp"; then
    log "ministack $have already installed in $venv"
    return 0
  fi
  log "installing ministack $want and its pinned companions into $venv (found: ${have:-none})"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  have=$(installed_version)
  [[ "$have" == "$want" ]] || die "installed ministack is '${have:-none}', want $want"
  cp "$requirements" "$stamp"
  log "ministack $have installed"
}

# start_proxy builds integration/testbed/cmd/faultproxy and starts it on
# the port, in front of MiniStack on the inner port (which comes up after
# it).
start_proxy() {
  local inner="http://127.0.0.1:$inner_port" ppid
  (exec 3<>"/dev/tcp/127.0.0.1/$inner_port") 2>/dev/null &&
    die "inner port $inner_port is taken; set BULKRUN_EMULATOR_INNER_PORT"
  (cd "$repo_root" && go build -o "$proxy_bin" ./integration/testbed/cmd/faultproxy) || die "cannot build integration/testbed/cmd/faultproxy"
  [[ -f "$proxy_log" ]] && mv -f "$proxy_log" "$proxy_log.prev"
  local lane=()
  if [[ "$iam_lane" == 1 ]]; then
    [[ -d "$repo_root/tools/iam/node_modules/@cloud-copilot/iam-simulate" ]] ||
      die "BULKRUN_IAM_LANE=1 needs the lane's evaluator: make tools (npm ci in tools/iam)"
    lane=(-iam-lane "$repo_root/tools/iam" -iam-stack "${BULKRUN_IAM_STACK:-bulkrun}")
    [[ "${BULKRUN_IAM_AUDIT:-0}" == 1 ]] && lane+=(-iam-audit)
  fi
  # API Gateway's rules on the REST API's calls: SigV4 verified against
  # the emulator's credentials — the callers' (test) and its functions'
  # (the account id as access key, the same secret: a function calling
  # the API, as examples/stepfunctions' submitter does) — and Lambda's
  # response limit.
  setsid nohup "$proxy_bin" -listen "0.0.0.0:$port" -upstream "$inner" "${lane[@]}" -verify-sigv4 test:test,000000000000:test >"$proxy_log" 2>&1 </dev/null &
  ppid=$!
  echo "$ppid" >"$proxy_pid_file"
  local deadline=$((SECONDS + 10))
  until port_open; do
    alive "$ppid" || { tail -n 20 "$proxy_log" >&2; die "faultproxy exited"; }
    ((SECONDS < deadline)) || die "faultproxy does not listen on $port"
    sleep 0.2
  done
  log "faultproxy pid $ppid on port $port -> $inner, log $proxy_log${lane:+, IAM lane on (${BULKRUN_IAM_STACK:-bulkrun})}"
}

# stop_proxy stops the proxy this script started, if any.
stop_proxy() {
  local ppid=""
  [[ -f "$proxy_pid_file" ]] && ppid=$(tr -dc '0-9' <"$proxy_pid_file")
  if alive "$ppid"; then
    kill -TERM "$ppid" 2>/dev/null || true
    local deadline=$((SECONDS + 5))
    while alive "$ppid" && ((SECONDS < deadline)); do sleep 0.1; done
    alive "$ppid" && kill -KILL "$ppid" 2>/dev/null || true
    log "faultproxy stopped (pid $ppid)"
  fi
  rm -f "$proxy_pid_file"
}

cmd_start() {
  if healthy; then
    log "already running: $health_url answers (pid $(read_pid || true))"
    return 0
  fi
  local pid
  pid=$(read_pid)
  if alive "$pid"; then
    if [[ "$(running_port)" != "$port" ]]; then
      die "pid $pid from $pid_file serves port $(running_port), not $port; stop it first (BULKRUN_EMULATOR_PORT=$(running_port) bash $0 stop)"
    fi
    log "pid $pid from $pid_file is alive but not healthy yet; waiting for it"
  else
    if port_open; then
      die "port $port is taken by something that does not answer $health_url; free it or set BULKRUN_EMULATOR_PORT"
    fi
    [[ -x "$venv/bin/ministack" && "$(installed_version)" == "$(pinned_version)" ]] || cmd_install
    mkdir -p "$state_dir"
    rm -rf "$tmp_dir"
    mkdir -p "$tmp_dir"
    [[ -f "$log_file" ]] && mv -f "$log_file" "$log_file.prev"
    local gateway_port=$port
    if [[ "$fault_proxy" == 1 ]]; then
      start_proxy
      gateway_port=$inner_port
    fi
    # Started in a new session (setsid) so that it survives the calling shell
    # and so that its pid is also its process group id: stop kills the group.
    # AWS_ENDPOINT_URL is the outer port: with the proxy, functions call it.
    env \
      GATEWAY_PORT="$gateway_port" \
      AWS_ENDPOINT_URL="$endpoint" \
      TMPDIR="$tmp_dir" \
      AWS_DEFAULT_REGION=us-east-1 \
      AWS_ACCESS_KEY_ID=test \
      AWS_SECRET_ACCESS_KEY=test \
      BULKRUN_SQS_DELIVERY="${BULKRUN_SQS_DELIVERY:-shuffled}" \
      BULKRUN_SQS_DELIVERY_SEED="${BULKRUN_SQS_DELIVERY_SEED:-}" \
      BULKRUN_SQS_FAIR="${BULKRUN_SQS_FAIR:-1}" \
      setsid nohup "$venv/bin/python" "$repo_root/localstack/delivery.py" >"$log_file" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pid_file"
    echo "$port" >"$port_file"
    log "started pid $pid on port $gateway_port, log $log_file"
  fi

  local deadline=$((SECONDS + start_timeout_seconds))
  until healthy; do
    if ! alive "$pid"; then
      log "ministack (pid $pid) exited before it became healthy; last 40 log lines:"
      tail -n 40 "$log_file" >&2 || true
      rm -f "$pid_file" "$port_file"
      stop_proxy
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      log "no answer from $health_url after ${start_timeout_seconds}s; last 40 log lines:"
      tail -n 40 "$log_file" >&2 || true
      cmd_stop || true
      exit 1
    fi
    sleep 0.5
  done
  log "healthy: $health_url"
}

cmd_stop() {
  local pid
  pid=$(read_pid)
  stop_proxy
  if ! alive "$pid"; then
    rm -f "$pid_file" "$port_file"
    if healthy; then
      die "something answers on port $port but it was not started by this script (no live pid in $pid_file); not stopping it"
    fi
    log "not running"
    return 0
  fi
  # Wait on the port it was started with, which may not be this call's.
  port=$(running_port)
  # Lambda function processes are its children; list them before the parent
  # goes, as they are re-parented after that.
  local children
  children=$(descendants "$pid" | tr '\n' ' ')
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  # shellcheck disable=SC2086
  [[ -n "$children" ]] && kill -TERM $children 2>/dev/null || true

  local deadline=$((SECONDS + stop_timeout_seconds)) child
  while alive "$pid" || port_open; do
    if ((SECONDS >= deadline)); then
      log "still up after ${stop_timeout_seconds}s; sending SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      for child in $children; do kill -KILL "$child" 2>/dev/null || true; done
      sleep 1
      if alive "$pid" || port_open; then
        die "pid $pid or port $port still busy after SIGKILL"
      fi
      break
    fi
    sleep 0.25
  done
  for child in $children; do kill -KILL "$child" 2>/dev/null || true; done
  rm -f "$pid_file" "$port_file"
  log "stopped (pid $pid); port $port is free"
}

cmd_status() {
  local body
  if body=$(http GET "$health_url"); then
    printf '%s\n' "$body"
    return 0
  fi
  echo "not running"
  return 1
}

cmd_reset() {
  local body
  body=$(http POST "$endpoint/_ministack/reset") || die "reset failed: is it running? (bash localstack/ministack.sh status)"
  printf '%s\n' "$body"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  reset) cmd_reset ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
