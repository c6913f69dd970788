#!/usr/bin/env bash
# Fetches, at set-up time only, the jars of a Kafka broker (org.apache.kafka:kafka_2.13 and kafka-tools with their
# runtime dependencies) from Maven into $KAFKA_LIBS, and tries Beam's Java IO expansion service (which Beam's
# Python Kafka IO needs) for the installed Beam into $JARS_DIR; says on one line when that one is not served.
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [ ! -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
  echo "==> fetching Kafka $KAFKA_VERSION jars into $KAFKA_LIBS"
  work="$(mktemp -d)"
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>wevent.integration</groupId><artifactId>kafka-broker-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
POM
  mkdir -p "$KAFKA_LIBS.partial"
  (cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS.partial") \
    || { echo "Kafka: its jars could not be fetched from Maven" >&2; rm -rf "$work"; exit 1; }
  rm -rf "$work" "$KAFKA_LIBS" && mv "$KAFKA_LIBS.partial" "$KAFKA_LIBS"
fi
echo "Kafka $KAFKA_VERSION: $KAFKA_LIBS"

BEAM_VERSION="$(beam_sdk_version)"
EXPANSION="org.apache.beam:beam-sdks-java-io-expansion-service:$BEAM_VERSION"
if ls "$JARS_DIR"/beam-sdks-java-io-expansion-service-*.jar >/dev/null 2>&1; then
  echo "Beam Kafka IO expansion service: $(ls "$JARS_DIR"/beam-sdks-java-io-expansion-service-*.jar | tail -1)"
elif mvn -q -B dependency:copy -Dartifact="$EXPANSION" -DoutputDirectory="$JARS_DIR" >"$JARS_DIR/mvn-expansion.log" 2>&1; then
  echo "Beam Kafka IO expansion service: $JARS_DIR"
else
  echo "Beam Kafka IO expansion service: $EXPANSION is not served by the Maven repository; Beam cannot read Kafka here" >&2
  echo "expansion-service missing $EXPANSION" > "$JARS_DIR/STATUS-kafka"
fi
