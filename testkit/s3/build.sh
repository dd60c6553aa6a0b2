#!/usr/bin/env bash
# Build versitygw, the S3-compatible server of the object-store tests (testkit/src/s3.rs,
# testkit/tests/s3.rs), from the Go module proxy (scripts/go-tool.sh).
# Cold (empty Go build and module caches, 2 cores): 94 s; warm: returns at once.
#
#   testkit/s3/build.sh            # build into ~/.cache/kruntimes/tools/versitygw-<version>/ if missing
#   testkit/s3/build.sh --print    # print the path of the versitygw binary (builds nothing)
#
# Either way the last line printed is the binary's path. The version string is stamped in as its
# Makefile does.
set -euo pipefail

VERSITYGW_VERSION="${KRT_VERSITYGW_VERSION:-v1.8.0}"
TOOL="$(dirname "$0")/../../scripts/go-tool.sh"
if [[ "${1:-}" == "--print" ]]; then
  exec bash "$TOOL" --print versitygw "$VERSITYGW_VERSION"
fi
exec bash "$TOOL" versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw \
  "-X main.Version=$VERSITYGW_VERSION -X main.Build=release" "--version"
