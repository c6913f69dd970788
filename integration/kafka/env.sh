# Settings of the Kafka broker scripts (sourced): the jars in $WEVENT_INTEGRATION_HOME/lib/kafka-<version>/, the
# running broker's configuration, data, log and pid in $WEVENT_INTEGRATION_HOME/run/kafka/.
source "$(dirname "${BASH_SOURCE[0]}")/../flink/env.sh"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_LIBS="$WEVENT_INTEGRATION_HOME/lib/kafka-$KAFKA_VERSION"
KAFKA_RUN="$WEVENT_INTEGRATION_HOME/run/kafka"
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"
kafka_java() { java -Xms64m -Xmx384m -cp "$KAFKA_LIBS/*" "$@" 2> >(grep -v '^SLF4J' >&2); }
