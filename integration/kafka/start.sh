#!/usr/bin/env bash
# Starts one Kafka broker in KRaft mode (its own controller, no ZooKeeper) listening on 127.0.0.1 only; formats its
# storage on the first start. Pid in $KAFKA_RUN/broker.pid, console in $KAFKA_RUN/broker.out.
set -euo pipefail
source "$(dirname "$0")/env.sh"
[ -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ] || { echo "Kafka is not set up: run integration/kafka/setup.sh" >&2; exit 2; }
mkdir -p "$KAFKA_RUN"
if [ -f "$KAFKA_RUN/broker.pid" ] && kill -0 "$(cat "$KAFKA_RUN/broker.pid")" 2>/dev/null; then
  echo "a broker is already running (pid $(cat "$KAFKA_RUN/broker.pid"))" >&2; exit 2
fi
cat > "$KAFKA_RUN/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_RUN/data
num.partitions=2
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
if [ ! -f "$KAFKA_RUN/data/meta.properties" ]; then
  kafka_java kafka.tools.StorageTool format -t "$(kafka_java kafka.tools.StorageTool random-uuid | tail -1)" \
    -c "$KAFKA_RUN/server.properties" >/dev/null
fi
nohup java -Xms128m -Xmx384m -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_RUN/server.properties" \
  >"$KAFKA_RUN/broker.out" 2>&1 </dev/null &
echo $! > "$KAFKA_RUN/broker.pid"
for _ in $(seq 1 60); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
    echo "Kafka $KAFKA_VERSION broker (KRaft) up: $KAFKA_BOOTSTRAP, pid $(cat "$KAFKA_RUN/broker.pid")"; exit 0
  fi
  kill -0 "$(cat "$KAFKA_RUN/broker.pid")" 2>/dev/null || { echo "the broker exited; see $KAFKA_RUN/broker.out" >&2; exit 1; }
  sleep 1
done
echo "the broker did not listen within 60 s; see $KAFKA_RUN/broker.out" >&2
"$(dirname "$0")/stop.sh"; exit 1
