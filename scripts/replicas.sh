#!/usr/bin/env bash
# Starts N local `gem4 serve` replicas and Debian's nginx in front of them on 127.0.0.1:PORT, with the
# config generated from deploy/nginx/gem4.conf.template. Prints "replicas: ready on http://..." once
# every replica answers GET /health and nginx listens; SIGTERM or SIGINT stops them all.
#
#   scripts/replicas.sh --model FILE --replicas N --port PORT [--policy affinity|round-robin]
#                       [--gem4 BIN] [--run-dir DIR] [-- gem4 serve flags...]
#
# --policy affinity (default) routes each conversation to one replica (the X-Gem4-Affinity header,
# else the OpenAI "user" field, else the first message; see the template); round-robin spreads
# requests evenly. Replicas listen on free loopback ports; their logs are in the run folder: a
# temporary one, removed when they stop, unless --run-dir names one to keep.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
model="" replicas=2 port="" policy=affinity gem4="${GEM4:-$here/build/bin/gem4}" run_dir="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --gem4) gem4="$2"; shift 2 ;;
    --run-dir) run_dir="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "replicas: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "replicas: --model FILE is required" >&2; exit 2; }
[ -n "$port" ] || { echo "replicas: --port PORT is required" >&2; exit 2; }
[[ "$replicas" =~ ^[1-9][0-9]*$ ]] || { echo "replicas: --replicas must be a positive number" >&2; exit 2; }
case "$policy" in
  affinity) balance='hash $gem4_affinity consistent;' ;;
  round-robin) balance='' ;;
  *) echo "replicas: --policy must be affinity or round-robin" >&2; exit 2 ;;
esac
[ -x "$gem4" ] || { echo "replicas: no gem4 binary at $gem4 (build it, or pass --gem4 BIN)" >&2; exit 2; }
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || { echo "replicas: nginx is not installed (scripts/install-deps.sh)" >&2; exit 2; }
own_run_dir=0
[ -n "$run_dir" ] || { run_dir="$(mktemp -d /tmp/gem4-replicas.XXXXXX)"; own_run_dir=1; }
mkdir -p "$run_dir"/{body,proxy,fastcgi,uwsgi,scgi}
chmod 755 "$run_dir"
chmod 777 "$run_dir"/{body,proxy,fastcgi,uwsgi,scgi}  # nginx workers run as nobody under root

pids=()
nginx_pid=""
stop_all() {
  trap - TERM INT EXIT
  [ -n "$nginx_pid" ] && kill -TERM "$nginx_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  [ -n "$nginx_pid" ] && wait "$nginx_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ "$own_run_dir" = 1 ] && rm -rf "$run_dir"
  echo "replicas: stopped"
}
trap 'stop_all; exit 0' TERM INT
trap 'stop_all' EXIT

ports=()
for i in $(seq 1 "$replicas"); do
  "$gem4" serve -m "$model" --port 0 "${extra[@]}" >"$run_dir/replica-$i.log" 2>&1 &
  pids+=($!)
done
# Each replica prints "bound http://127.0.0.1:PORT" at once and answers /health 200 once loaded.
for i in $(seq 1 "$replicas"); do
  log="$run_dir/replica-$i.log" p=""
  for _ in $(seq 1 600); do
    p="$(sed -n 's/.*bound http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)"
    [ -n "$p" ] && curl -sf "http://127.0.0.1:$p/health" >/dev/null 2>&1 && break
    kill -0 "${pids[$((i - 1))]}" 2>/dev/null || { echo "replicas: replica $i exited:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$p/health" >/dev/null 2>&1 || { echo "replicas: replica $i not ready" >&2; exit 1; }
  ports+=("$p")
  echo "replicas: replica $i pid ${pids[$((i - 1))]} on http://127.0.0.1:$p"
done

servers=""
for p in "${ports[@]}"; do servers+="server 127.0.0.1:$p max_fails=1 fail_timeout=5s; "; done
sed -e "s|@RUN_DIR@|$run_dir|g" -e "s|@LISTEN@|127.0.0.1:$port|g" -e "s|@SERVERS@|$servers|" \
    -e "s|@BALANCE@|$balance|" "$here/deploy/nginx/gem4.conf.template" >"$run_dir/nginx.conf"
"$nginx_bin" -t -q -p "$run_dir" -c "$run_dir/nginx.conf" -e "$run_dir/nginx-error.log" 2>&1 | grep -v "^$" >&2 || true
"$nginx_bin" -p "$run_dir" -c "$run_dir/nginx.conf" -e "$run_dir/nginx-error.log" -g 'daemon off;' &
nginx_pid=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$nginx_pid" 2>/dev/null || { echo "replicas: nginx exited:" >&2; cat "$run_dir/nginx-error.log" >&2; exit 1; }
  sleep 0.1
done
echo "replicas: ready on http://127.0.0.1:$port ($replicas replicas, policy $policy, logs in $run_dir)"
# Wait until a signal arrives or a process dies; a dead replica is nginx's to route around.
while kill -0 "$nginx_pid" 2>/dev/null; do sleep 0.5 & wait $! || true; done
echo "replicas: nginx exited" >&2
exit 1
