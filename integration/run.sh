#!/usr/bin/env bash
# One command for the runs beyond one Python process (`./run_local.sh flink` calls it):
#   1. sets up what they need, at set-up time only (integration/flink/setup.sh: Flink from PyPI, Beam's Flink
#      job-server jar from Maven; integration/prism/setup.sh: Beam's Prism runner built with go install);
#   2. goes on in a new network namespace whose only interface is loopback (Beam's job and worker servers listen
#      on every interface; nothing started below can be reached from, or reach, another address), where it
#      starts a Flink cluster on 127.0.0.1 (a JobManager, two TaskManagers) and checks it reports two slots;
#   3. replays the main job's stream with --insecure-seed on each target runner and on the in-process FnApiRunner
#      and compares every output file (integration/compare_runners.py); the FlinkRunner only where its job-server jar could be fetched (it says why not otherwise);
#   4. starts a Kafka broker in KRaft mode on 127.0.0.1 (integration/kafka/), produces part of the stream into a
#      topic at a steady rate and prints the topic's offsets; the streaming job reads it only where Beam's Kafka IO
#      expansion service could be fetched (it says why not otherwise);
#   5. stops every process it started, and prints where the outputs are.
# Options: --small (a 12,000-record generated stream and the central job only), --targets LIST (default
# flink,prism,portable; of flink, prism, portable, multiprocess, bundle-direct).
set -euo pipefail
cd "$(dirname "$0")/.."
source integration/kafka/env.sh
SMALL=0; TARGETS="flink,prism,portable"; ARGS=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --small) SMALL=1 ;;
    --targets) TARGETS="$2"; shift ;;
    *) echo "integration/run.sh: unknown argument $1 (--small, --targets LIST)" >&2; exit 2 ;;
  esac
  shift
done
command -v java >/dev/null || { echo "integration/run.sh: no java on this machine: Flink needs Java 11 or later" >&2; exit 3; }
OUT="$PROJECT_ROOT/output/runners"
mkdir -p "$OUT"
strip_target() { TARGETS="$(echo ",$TARGETS," | sed "s/,$1,/,/; s/^,//; s/,\$//")"; }

if [ -z "${WEVENT_IN_LOOPBACK_NAMESPACE:-}" ]; then  # set-up, with the network
integration/flink/setup.sh
integration/kafka/setup.sh || echo "Kafka: not set up"
if [[ ",$TARGETS," == *",prism,"* ]]; then
  if PRISM="$(integration/prism/setup.sh)"; then export WEVENT_PRISM="$PRISM"
  else echo "Prism: not run (integration/prism/setup.sh failed)"; strip_target prism; fi
fi

if [ "$SMALL" = 1 ]; then
  STREAM="$OUT/small_stream.jsonl"; JOBS=central
  "$PROJECT_PYTHON" -c "import sys; from transforms.loaders import synthetic_taxi_stream; synthetic_taxi_stream(sys.argv[1], taxis=400, hours=3)" "$STREAM"
else
  STREAM="$PROJECT_ROOT/output/default_stream.jsonl"; JOBS=central,ldp,numeric
  [ -f "$STREAM" ] || (cd "$PROJECT_ROOT" && "$PROJECT_PYTHON" -m pipelines.local)  # the main job writes it first
fi
for unshare in "unshare -n" "unshare -r -n"; do
  if $unshare sh -c 'ip link set lo up' 2>/dev/null; then
    export WEVENT_IN_LOOPBACK_NAMESPACE=1 WEVENT_RUN_STREAM="$STREAM" WEVENT_RUN_JOBS="$JOBS" WEVENT_RUN_TARGETS="$TARGETS"
    exec $unshare sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "${ARGS[@]}"
  fi
done
echo "integration/run.sh: no loopback-only network namespace can be made here (unshare -n refused): not run" >&2
exit 3
fi
STREAM="$WEVENT_RUN_STREAM"; JOBS="$WEVENT_RUN_JOBS"; TARGETS="$WEVENT_RUN_TARGETS"

trap 'integration/flink/stop.sh' EXIT
integration/flink/start.sh
curl -s --max-time 5 "http://127.0.0.1:$FLINK_REST_PORT/overview"; echo
if [[ ",$TARGETS," == *",flink,"* ]] && ! ls "$JARS_DIR"/beam-runners-flink-*-job-server-*.jar >/dev/null 2>&1; then
  echo "FlinkRunner: not run: $(cat "$JARS_DIR/STATUS" 2>/dev/null || echo 'no job-server jar') (the cluster above ran no Beam job)"
  strip_target flink
fi
if [[ ",$TARGETS," != *",flink,"* ]]; then integration/flink/stop.sh; trap - EXIT; fi  # no job for it: free its memory
if [ -z "$TARGETS" ]; then echo "no target runner left to compare"; exit 1; fi

status=0
"$PROJECT_PYTHON" -m integration.compare_runners --target "$TARGETS" --jobs "$JOBS" --input "$STREAM" \
  --work "$OUT/compare" --loopback-namespace || status=1
if [ -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
  trap 'integration/kafka/stop.sh' EXIT
  integration/kafka/start.sh
  if [ "$SMALL" = 1 ]; then COUNT=2000; else COUNT=20000; fi
  echo "producing $COUNT events of $STREAM into topic wevent-events at 1000 a second"
  integration/kafka/produce.sh "$STREAM" wevent-events 1000 "$COUNT"
  if [ -f "$JARS_DIR/STATUS-kafka" ]; then
    echo "streaming job on Kafka: not run: $(cat "$JARS_DIR/STATUS-kafka") (Beam's Python Kafka IO is a Java transform)"
  fi
  integration/kafka/stop.sh; trap - EXIT
fi
echo "outputs: $OUT (each job's in_process/ and <target>/ folders, logs beside them); Flink logs: $FLINK_LOG_DIR"
exit $status
