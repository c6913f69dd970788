#!/usr/bin/env bash
# Starts a Flink session cluster on loopback only: one JobManager and two TaskManagers (one slot each, so
# parallelism 2), every address 127.0.0.1. Each JVM's pid is kept in $FLINK_RUN/<name>.pid, its console in
# $FLINK_RUN/logs/<name>.out (Flink's own logs beside it). Waits until the REST API reports both TaskManagers.
set -euo pipefail
source "$(dirname "$0")/env.sh"
[ -x "$FLINK_HOME/bin/jobmanager.sh" ] || { echo "Flink is not installed: run integration/flink/setup.sh first" >&2; exit 2; }
mkdir -p "$FLINK_CONF_DIR" "$FLINK_LOG_DIR"

running() { [ -f "$FLINK_RUN/$1.pid" ] && kill -0 "$(cat "$FLINK_RUN/$1.pid")" 2>/dev/null; }
if running jobmanager; then echo "a JobManager is already running (pid $(cat "$FLINK_RUN/jobmanager.pid"))" >&2; exit 2; fi

cp "$FLINK_HOME"/conf/log4j*.properties "$FLINK_HOME"/conf/logback*.xml "$FLINK_CONF_DIR"/
JAVA_OPTS_ALL="$(sed -n 's/^ *all: \(--add-.*\)$/\1/p' "$FLINK_HOME/conf/config.yaml" | head -1)"
cat > "$FLINK_CONF_DIR/config.yaml" <<YAML
env.java.opts.all: $JAVA_OPTS_ALL
jobmanager.rpc.address: 127.0.0.1
jobmanager.rpc.port: $FLINK_RPC_PORT
jobmanager.bind-host: 127.0.0.1
jobmanager.memory.process.size: 768m
jobmanager.execution.failover-strategy: region
taskmanager.host: 127.0.0.1
taskmanager.bind-host: 127.0.0.1
taskmanager.numberOfTaskSlots: 1
taskmanager.memory.process.size: 1024m
taskmanager.memory.managed.size: 64m
parallelism.default: 1
rest.address: 127.0.0.1
rest.bind-address: 127.0.0.1
rest.port: $FLINK_REST_PORT
blob.server.port: 0
metrics.internal.query-service.port: 0
query.server.port: 0
state.checkpoints.dir: file://$FLINK_RUN/checkpoints
YAML

start_one() {  # name, script: runs the script in the foreground of a background job; its pid is the JVM's
  FLINK_IDENT_STRING="$1" nohup "$FLINK_HOME/bin/$2" start-foreground >"$FLINK_LOG_DIR/$1.out" 2>&1 </dev/null &
  echo $! > "$FLINK_RUN/$1.pid"
  echo "started $1 (pid $!)"
}
start_one jobmanager jobmanager.sh
for i in $(seq 1 "$FLINK_TASKMANAGERS"); do start_one "taskmanager-$i" taskmanager.sh; done

for _ in $(seq 1 90); do
  registered="$(curl -s --max-time 2 "http://127.0.0.1:$FLINK_REST_PORT/taskmanagers" \
    | "$PROJECT_PYTHON" -c 'import json,sys; print(len(json.load(sys.stdin)["taskmanagers"]))' 2>/dev/null || echo 0)"
  if [ "$registered" = "$FLINK_TASKMANAGERS" ]; then
    echo "Flink $FLINK_VERSION up: http://127.0.0.1:$FLINK_REST_PORT, $registered TaskManagers; logs in $FLINK_LOG_DIR"
    exit 0
  fi
  for name in jobmanager $(seq -f "taskmanager-%g" 1 "$FLINK_TASKMANAGERS"); do
    running "$name" || { echo "$name exited; see $FLINK_LOG_DIR/$name.out" >&2; "$(dirname "$0")/stop.sh"; exit 1; }
  done
  sleep 2
done
echo "the cluster did not report $FLINK_TASKMANAGERS TaskManagers within 180 s; logs in $FLINK_LOG_DIR" >&2
"$(dirname "$0")/stop.sh"
exit 1
