#!/usr/bin/env bash
# produce.sh FILE TOPIC RATE [COUNT]: sends FILE's lines (JSON events) into TOPIC at RATE lines a second (at most
# COUNT of them) through Kafka's console producer, then prints each partition's end offset.
set -euo pipefail
source "$(dirname "$0")/env.sh"
[ $# -ge 3 ] || { echo "usage: integration/kafka/produce.sh FILE TOPIC RATE [COUNT]" >&2; exit 2; }
file="$1"; topic="$2"; rate="$3"; count="${4:-0}"
kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BOOTSTRAP" --create --if-not-exists \
  --topic "$topic" --partitions 2 >/dev/null
"$PROJECT_PYTHON" - "$file" "$rate" "$count" <<'PY' | kafka_java org.apache.kafka.tools.ConsoleProducer \
  --bootstrap-server "$KAFKA_BOOTSTRAP" --topic "$topic"
import sys, time
path, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
start = time.monotonic()
with open(path) as events:
    for sent, line in enumerate(events):
        if count and sent >= count:
            break
        time.sleep(max(0.0, start + sent / rate - time.monotonic()))  # a steady rate, not bursts
        sys.stdout.write(line)
        sys.stdout.flush()
PY
kafka_java org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$KAFKA_BOOTSTRAP" --topic "$topic"
