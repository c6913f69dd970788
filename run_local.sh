#!/usr/bin/env bash
# Sets itself up on a fresh machine (Python 3.11 only), then:
#   ./run_local.sh            runs the main job on the project's own default data
#   ./run_local.sh test       runs the whole test suite
#   ./run_local.sh flink      sets up Flink, Prism and their jars, starts a Flink cluster on 127.0.0.1 and compares
#                             the replay on other runners with the in-process run (integration/run.sh; needs Java)
#   ./run_local.sh <args...>  passes the arguments to the main job
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.installed-$(cat setup.py | sha256sum | cut -c1-16)"

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtual environment in $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ]; then
  echo "==> installing the project and its test dependencies (first run only)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e ".[test]"
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
  echo "==> installed; for the wevent command (every command of the README and docs/): . $VENV/bin/activate"
fi

if [ "${1:-}" = "flink" ]; then
  shift
  PROJECT_PYTHON="$PWD/$VENV/bin/python" exec integration/run.sh "$@"
fi
if [ "${1:-}" = "test" ]; then
  shift
  exec "$VENV/bin/python" -m pytest "$@"
fi
exec "$VENV/bin/python" -m pipelines.local "$@"
