#!/usr/bin/env bash
# Build versitygw, the S3-compatible server of the object-store tests (testkit/src/s3.rs,
# testkit/tests/s3.rs), from the Go module proxy.
# Cold (empty Go build and module caches, 2 cores): 94 s; warm: returns at once.
#
#   testkit/s3/build.sh            # build into ~/.cache/kruntimes/tools/versitygw-<version>/ if missing
#   testkit/s3/build.sh --print    # print the path of the versitygw binary (builds nothing)
#
# Either way the last line printed is the binary's path. `go install module@version` builds the
# command from the module's own go.mod (no wrapper module, no replace directives), so the build is
# exactly the released versitygw; the version string is stamped in as its Makefile does.
set -euo pipefail

VERSITYGW_VERSION="${KRT_VERSITYGW_VERSION:-v1.8.0}"
ROOT="${KRT_TOOLS_ROOT:-$HOME/.cache/kruntimes/tools}"
DIR="$ROOT/versitygw-$VERSITYGW_VERSION"
BIN="$DIR/versitygw"

if [[ "${1:-}" == "--print" ]]; then
  echo "$BIN"
  exit 0
fi

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "versitygw: the go command is required" >&2; exit 1; }
mkdir -p "$DIR"
# Test processes may run this at the same time: one builds, the others wait for its binary.
exec 9>"$DIR/.build.lock"
flock 9
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
start=$(date +%s)
echo "versitygw: building versitygw $VERSITYGW_VERSION (about a minute and a half on cold Go caches)" >&2
# GOBIN is the versioned directory itself; go install writes the binary there only once the
# build has succeeded, so an interrupted build leaves nothing that looks installed.
GOBIN="$DIR" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath \
  -ldflags "-s -w -X main.Version=$VERSITYGW_VERSION -X main.Build=release" \
  "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
"$BIN" --version >&2
echo "versitygw: built in $(( $(date +%s) - start )) s into $DIR" >&2
echo "$BIN"
