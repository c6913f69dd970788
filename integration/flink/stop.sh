#!/usr/bin/env bash
# Stops the JVMs that start.sh started, by the pids it recorded (TERM, then KILL after 30 s), and removes the pid files.
set -uo pipefail
source "$(dirname "$0")/env.sh"
for pidfile in "$FLINK_RUN"/taskmanager-*.pid "$FLINK_RUN"/jobmanager.pid; do
  [ -f "$pidfile" ] || continue
  pid="$(cat "$pidfile")"; name="$(basename "$pidfile" .pid)"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
rm -f "$FLINK_RUN"/flink-*.pid
