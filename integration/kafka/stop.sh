#!/usr/bin/env bash
# Stops the broker start.sh started, by its pid (TERM, then KILL after 30 s).
set -uo pipefail
source "$(dirname "$0")/env.sh"
pidfile="$KAFKA_RUN/broker.pid"
[ -f "$pidfile" ] || exit 0
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  echo "stopped the Kafka broker (pid $pid)"
fi
rm -f "$pidfile"
