#!/usr/bin/env bash
# Builds Beam's Prism runner (a portable runner of its own, written in Go: job service, bundles, watermarks,
# state and timers outside Python) for the installed Beam SDK's version, from the Beam Go SDK's module through
# `go install`, at set-up time only; Beam's PrismRunner would otherwise download a release binary at run time.
# Prints the binary's path. Needs Go (>= 1.25); about 7 minutes and 0.5 GB of module cache on 2 cores.
set -euo pipefail
source "$(dirname "$0")/../flink/env.sh"
BEAM_VERSION="$(beam_sdk_version)"
PRISM_DIR="$WEVENT_INTEGRATION_HOME/lib/prism-$BEAM_VERSION"
if [ ! -x "$PRISM_DIR/prism" ]; then
  command -v go >/dev/null || { echo "Prism: no Go toolchain on this machine" >&2; exit 2; }
  echo "==> building Beam's Prism runner $BEAM_VERSION into $PRISM_DIR (go install, first run only)" >&2
  GOBIN="$PRISM_DIR" GOPATH="$WEVENT_INTEGRATION_HOME/lib/go" GOFLAGS=-modcacherw \
    go install "github.com/apache/beam/sdks/v2/go/cmd/prism@v$BEAM_VERSION" >&2
fi
echo "$PRISM_DIR/prism"
