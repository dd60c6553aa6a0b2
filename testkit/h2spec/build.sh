#!/usr/bin/env bash
# Build h2spec, the HTTP/2 conformance suite the gateway's protocol-fault test runs
# (gateway/tests/protocol_faults.rs), from the Go module proxy (scripts/go-tool.sh).
# Cold (empty Go build and module caches, 2 cores): about 20 s; warm: returns at once.
#
#   testkit/h2spec/build.sh            # build into ~/.cache/kruntimes/tools/h2spec-<version>/ if missing
#   testkit/h2spec/build.sh --print    # print the path of the h2spec binary (builds nothing)
set -euo pipefail

# The newest release the module proxy serves (its v2.6.0 is refused; v2.2.1 has no go.mod, so Go
# names it +incompatible).
H2SPEC_VERSION="${KRT_H2SPEC_VERSION:-v2.2.1+incompatible}"
TOOL="$(dirname "$0")/../../scripts/go-tool.sh"
if [[ "${1:-}" == "--print" ]]; then
  exec bash "$TOOL" --print h2spec "$H2SPEC_VERSION"
fi
exec bash "$TOOL" h2spec "$H2SPEC_VERSION" github.com/summerwind/h2spec/cmd/h2spec "" "--version"
