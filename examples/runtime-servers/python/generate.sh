#!/usr/bin/env bash
# Generates the Python stubs of the Runtime Server contract,
# kruntimes.runtime.v1 (runtime_pb2.py and runtime_pb2_grpc.py, top-level
# modules: the contract is one file that imports nothing) into OUT. The stubs are not
# committed: they are made from the contract at build or test time.
#
#   ./generate.sh OUT [PROTO_ROOT]
#
# PROTO_ROOT defaults to this repository's proto/proto.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: generate.sh OUT [PROTO_ROOT]}"
root="${2:-$here/../../../proto/proto}"
mkdir -p "$out"
# The contract's own directory is the include path, so the modules are
# top-level and cannot collide with the kruntimes SDK's package.
exec "${PYTHON:-python3}" -m grpc_tools.protoc \
  -I "$root/kruntimes/runtime/v1" \
  --python_out="$out" --grpc_python_out="$out" \
  "$root/kruntimes/runtime/v1/runtime.proto"
