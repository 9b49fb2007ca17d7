#!/usr/bin/env bash
# Issue 34's scenario: a proxy in front of two nginx backends under wrk -t2 -c64 for 12 s;
# backend A stopped (nginx -s stop) at 3 s, started again at 7 s. Prints failed requests.
# usage: scripts/backend-restart.sh STATOR_BINARY [ROUNDS] (loopback ports 18080-18090)
# Each round runs Stator, then nginx as a proxy with its defaults (proxy_next_upstream error
# timeout) in front of the same backends: the rival in the same invocation.
set -u
BIN=${1:?usage: scripts/backend-restart.sh STATOR_BINARY [ROUNDS]}; ROUNDS=${2:-3}
command -v wrk >/dev/null && command -v nginx >/dev/null || { echo "needs wrk and nginx (make test-deps)" >&2; exit 2; }
D=$(mktemp -d /tmp/stator-backend-restart.XXXXXX)
backend() { # name port
  mkdir -p $D/$1/logs
  cat > $D/$1/nginx.conf <<C
daemon on; worker_processes 1; pid $D/$1/nginx.pid; error_log $D/$1/error.log crit;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$2; location / { return 200 "$1\n"; } location /healthz { return 200; } } }
C
  nginx -p $D/$1 -c $D/$1/nginx.conf
}
backend a 18081; backend b 18082
mkdir -p $D/px/logs
cat > $D/px/nginx.conf <<C
daemon on; worker_processes 2; pid $D/px/nginx.pid; error_log $D/px/error.log crit;
events { worker_connections 8192; }
http { access_log off; upstream b { server 127.0.0.1:18081; server 127.0.0.1:18082; keepalive 64; }
  server { listen 127.0.0.1:18090; location / { proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
C
nginx -p $D/px -c $D/px/nginx.conf
cat > $D/stator.toml <<C
[node]
name = "r34"
[dataplane]
mode = "none"
[api]
socket = "$D/api.sock"
[log]
level = "warn"
[[pool]]
name = "app"
[pool.health]
method = "http"
path = "/healthz"
interval = "1s"
timeout = "500ms"
fall = 2
rise = 2
[[pool.backend]]
address = "127.0.0.1"
port = 18081
[[pool.backend]]
address = "127.0.0.1"
port = 18082
[[listener]]
name = "web"
address = "127.0.0.1:18080"
protocol = "http"
pool = "app"
workers = 2
C
$BIN run -c $D/stator.toml > $D/stator.log 2>&1 &
SP=$!
sleep 3
one() { # port
  wrk -t2 -c64 -d12s http://127.0.0.1:$1/ > $D/wrk.out 2>&1 &
  W=$!
  sleep 3; nginx -p $D/a -c $D/a/nginx.conf -s stop 2>/dev/null; sleep 4; nginx -p $D/a -c $D/a/nginx.conf
  wait $W
  local req=$(grep -oE '^ *[0-9]+ requests' $D/wrk.out | grep -oE '[0-9]+')
  local bad=$(grep -oE 'Non-2xx or 3xx responses: [0-9]+' $D/wrk.out | grep -oE '[0-9]+$'); bad=${bad:-0}
  local err=$(grep -oE 'Socket errors:.*' $D/wrk.out); err=${err:-none}
  echo "requests $req non2xx $bad socket-errors: $err"
  sleep 3
}
for r in $(seq $ROUNDS); do
  echo -n "round $r stator: "; one 18080
  echo -n "round $r nginx:  "; one 18090
done
curl -s --unix-socket $D/api.sock http://x/metrics | grep -E "stator_proxy_retries_total|exclusions_total" | head
kill $SP; for n in a b px; do nginx -p $D/$n -c $D/$n/nginx.conf -s stop 2>/dev/null; done
rm -rf "$D"
