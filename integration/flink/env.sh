# Shared settings of the Flink integration scripts (sourced, never run). Every path lives under one folder,
# WEVENT_INTEGRATION_HOME (default: <project>/.integration, ignored by git): installs in its lib/, the running
# cluster's configuration, logs and pid files in its run/flink/.
INTEGRATION_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT_ROOT="$(cd "$INTEGRATION_DIR/.." && pwd)"
WEVENT_INTEGRATION_HOME="${WEVENT_INTEGRATION_HOME:-$PROJECT_ROOT/.integration}"
PROJECT_PYTHON="${PROJECT_PYTHON:-$PROJECT_ROOT/.venv/bin/python}"
[ -x "$PROJECT_PYTHON" ] || PROJECT_PYTHON="$(command -v python3)"

# Flink 2.2 is the newest line Beam 2.77's FlinkRunner names (--flink_version 1.19 ... 2.2).
FLINK_VERSION="${FLINK_VERSION:-2.2.1}"
FLINK_MINOR="${FLINK_VERSION%.*}"
FLINK_INSTALL="$WEVENT_INTEGRATION_HOME/lib/flink-$FLINK_VERSION"
FLINK_HOME="$FLINK_INSTALL/pyflink"
JARS_DIR="$WEVENT_INTEGRATION_HOME/lib/jars"
FLINK_RUN="$WEVENT_INTEGRATION_HOME/run/flink"
FLINK_REST_PORT="${FLINK_REST_PORT:-8081}"
FLINK_RPC_PORT="${FLINK_RPC_PORT:-6123}"
FLINK_TASKMANAGERS=2
export FLINK_HOME FLINK_CONF_DIR="$FLINK_RUN/conf" FLINK_LOG_DIR="$FLINK_RUN/logs" FLINK_PID_DIR="$FLINK_RUN"

beam_sdk_version() { "$PROJECT_PYTHON" -c 'from importlib.metadata import version; print(version("apache-beam"))'; }
