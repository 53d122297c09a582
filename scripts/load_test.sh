#!/usr/bin/env bash
# A bounded HTTP load test with wrk (Debian package) on loopback: first against one `gem4 serve`
# replica, then against two behind nginx (scripts/replicas.sh, affinity policy). Each phase runs
# --duration seconds with --connections connections; each prints one line
#   load: <phase>: {"requests":..., "non_2xx":..., "latency_p99_ms":..., ...}
#
#   scripts/load_test.sh --model FILE [--gem4 BIN] [--duration S] [--connections C] [--max-tokens N]
#                        [-- gem4 serve flags...]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
model="" gem4="${GEM4:-$here/build/bin/gem4}" duration=5 connections=4 max_tokens=16 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --gem4) gem4="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "load_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "load_test: --model FILE is required" >&2; exit 2; }
command -v wrk >/dev/null || { echo "load_test: wrk is not installed (scripts/install-deps.sh)" >&2; exit 2; }
[ ${#extra[@]} -gt 0 ] || extra=(-t 1 --parallel 2)
export GEM4_LOAD_MAX_TOKENS="$max_tokens"
run_dir="$(mktemp -d /tmp/gem4-load.XXXXXX)"
server_pid="" replicas_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  [ -n "$replicas_pid" ] && kill -TERM "$replicas_pid" 2>/dev/null && wait "$replicas_pid" 2>/dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wrk_phase() {  # name url
  local out
  # One request first, outside the timed window: the path works end to end, and a replica's first
  # request (its pages faulting in) does not eat a short phase (under ASan on a loaded 2-core machine a
  # 1 s phase once finished no request at all).
  local warm_up='{"user":"load-warm-up","max_tokens":4,"messages":[{"role":"user","content":"In the beginning"}]}'
  if ! out="$(curl -sS -m 60 -H 'Content-Type: application/json' -d "$warm_up" -w '\n%{http_code}' \
                "$2/v1/chat/completions")" || [ "${out##*$'\n'}" != 200 ]; then
    echo "load_test: $1: the warm-up request failed: $out" >&2
    exit 1
  fi
  out="$(timeout $((duration + 60)) wrk -t 1 -c "$connections" -d "${duration}s" --timeout 30s \
           -s "$here/scripts/load_test.lua" "$2" | tail -1)"
  echo "load: $1: $out"
}

# One replica.
"$gem4" serve -m "$model" --port 0 "${extra[@]}" >"$run_dir/single.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$run_dir/single.log" | head -1)"
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$run_dir/single.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "load_test: the replica did not start" >&2; exit 1; }
wrk_phase "one replica" "http://127.0.0.1:$port"
kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""

# Two replicas behind nginx.
nginx_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
bash "$here/scripts/replicas.sh" --gem4 "$gem4" --model "$model" --replicas 2 --port "$nginx_port" \
  --run-dir "$run_dir/replicas" -- "${extra[@]}" >"$run_dir/replicas.log" 2>&1 &
replicas_pid=$!
for _ in $(seq 1 600); do
  grep -q "replicas: ready" "$run_dir/replicas.log" && break
  kill -0 "$replicas_pid" 2>/dev/null || { cat "$run_dir/replicas.log" >&2; exit 1; }
  sleep 0.1
done
grep -q "replicas: ready" "$run_dir/replicas.log" || { echo "load_test: replicas did not start" >&2; exit 1; }
wrk_phase "two replicas behind nginx" "http://127.0.0.1:$nginx_port"
