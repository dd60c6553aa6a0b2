#!/usr/bin/env bash
# Build a released Go command the tests use from the Go module proxy, once per version, into
# ~/.cache/kruntimes/tools/NAME-VERSION/NAME (KRT_TOOLS_ROOT moves the root). The one place the
# tools' scripts (kubetest/helm/build.sh, testkit/s3/build.sh, testkit/h2spec/build.sh) share.
#
#   scripts/go-tool.sh --print NAME VERSION                     # the binary's path (builds nothing)
#   scripts/go-tool.sh NAME VERSION PACKAGE [LDFLAGS] [CHECK]   # build if missing
#
# Either way the last line printed is the binary's path. PACKAGE is the command's import path,
# built at VERSION by `go install PACKAGE@VERSION` from the module's own go.mod (no wrapper
# module, no replace directives), so the build is exactly the released command. LDFLAGS are
# added to `-s -w` (version stamps); CHECK is the command's arguments that print its version
# once built (nothing is run without it).
set -euo pipefail

print=0
if [[ "${1:-}" == "--print" ]]; then
  print=1
  shift
fi
NAME="${1:?usage: go-tool.sh [--print] NAME VERSION [PACKAGE [LDFLAGS] [CHECK]]}"
VERSION="${2:?the version}"
ROOT="${KRT_TOOLS_ROOT:-$HOME/.cache/kruntimes/tools}"
DIR="$ROOT/$NAME-$VERSION"
BIN="$DIR/$NAME"

if [[ "$print" == 1 || -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

PACKAGE="${3:?the import path of the command}"
LDFLAGS="${4:-}"
CHECK="${5:-}"
command -v go >/dev/null || { echo "$NAME: the go command is required" >&2; exit 1; }
mkdir -p "$DIR"
# Test processes may run this at the same time: one builds, the others wait for its binary.
exec 9>"$DIR/.build.lock"
flock 9
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
start=$(date +%s)
echo "$NAME: building $PACKAGE@$VERSION with go install" >&2
# GOBIN is the versioned directory itself; go install writes the binary there only once the
# build has succeeded, so an interrupted build leaves nothing that looks installed.
GOBIN="$DIR" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w $LDFLAGS" \
  "$PACKAGE@$VERSION" >&2
if [[ -n "$CHECK" ]]; then
  # shellcheck disable=SC2086 # CHECK is a list of arguments
  "$BIN" $CHECK >&2
fi
echo "$NAME: built in $(( $(date +%s) - start )) s into $DIR" >&2
echo "$BIN"
