#!/usr/bin/env bash
# Installs, at set-up time only, what running the project on Apache Flink needs:
#   - Flink (distribution jars, bin/ scripts and default configuration) from PyPI's apache-flink-libraries and
#     apache-flink wheels, unpacked without dependencies into a private folder (the project's venv is untouched);
#   - Beam's Flink job-server jar for the installed Beam SDK, from Maven Central (mvn dependency:copy).
# Nothing is downloaded later, at run time. Exit 0 when Flink is installed; the job-server jar's absence is reported
# on one line (and in $WEVENT_INTEGRATION_HOME/lib/jars/STATUS) and makes `integration/flink/run_batch.sh` refuse to start.
set -euo pipefail
source "$(dirname "$0")/env.sh"
mkdir -p "$WEVENT_INTEGRATION_HOME/lib" "$JARS_DIR"

if [ ! -x "$FLINK_HOME/bin/jobmanager.sh" ] || [ ! -f "$FLINK_HOME/lib/flink-dist-$FLINK_VERSION.jar" ]; then
  echo "==> installing Flink $FLINK_VERSION from PyPI into $FLINK_INSTALL"
  rm -rf "$FLINK_INSTALL.partial"
  "$PROJECT_PYTHON" -m pip install --quiet --no-deps --no-compile --target "$FLINK_INSTALL.partial" \
    "apache-flink-libraries==$FLINK_VERSION" "apache-flink==$FLINK_VERSION"
  # The bin/ scripts ask a Python helper for FLINK_HOME when it is present; without it they use their parent folder.
  rm -f "$FLINK_INSTALL.partial/pyflink/find_flink_home.py"
  rm -rf "$FLINK_INSTALL" && mv "$FLINK_INSTALL.partial" "$FLINK_INSTALL"
fi
echo "Flink $FLINK_VERSION: $FLINK_HOME"

BEAM_VERSION="$(beam_sdk_version)"
JOB_SERVER="org.apache.beam:beam-runners-flink-$FLINK_MINOR-job-server:$BEAM_VERSION"
JOB_SERVER_JAR="$JARS_DIR/beam-runners-flink-$FLINK_MINOR-job-server-$BEAM_VERSION.jar"
if [ -f "$JOB_SERVER_JAR" ]; then
  echo "Beam job server: $JOB_SERVER_JAR"
elif mvn -q -B dependency:copy -Dartifact="$JOB_SERVER" -DoutputDirectory="$JARS_DIR" >"$JARS_DIR/mvn.log" 2>&1; then
  echo "Beam job server: $JOB_SERVER_JAR"
  echo "job-server ok $JOB_SERVER" > "$JARS_DIR/STATUS"
else
  echo "Beam job server: $JOB_SERVER is not served by the Maven repository (see $JARS_DIR/mvn.log); the FlinkRunner cannot run here" >&2
  echo "job-server missing $JOB_SERVER" > "$JARS_DIR/STATUS"
fi
