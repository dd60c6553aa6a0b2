#!/usr/bin/env bash
# Build helm v3, used by the chart tests (kubetest/tests/chart*.rs), from the Go module proxy
# (scripts/go-tool.sh). Cold (empty Go build and module caches, 2 cores): 118 s; warm: at once.
#
#   kubetest/helm/build.sh            # build into ~/.cache/kruntimes/tools/helm-<version>/ if missing
#   kubetest/helm/build.sh --print    # print the path of the helm binary (builds nothing)
#
# Either way the last line printed is the binary's path. The version string is stamped in as the
# release build does.
set -euo pipefail

HELM_VERSION="${KRT_HELM_VERSION:-v3.22.0}"
TOOL="$(dirname "$0")/../../scripts/go-tool.sh"
BIN="$(bash "$TOOL" --print helm "$HELM_VERSION")"
if [[ "${1:-}" == "--print" || -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "helm: the go command is required" >&2; exit 1; }
# helm's Makefile stamps the Kubernetes version its client libraries speak: it is the default
# `.Capabilities.KubeVersion` of `helm template` and `helm lint` (unstamped it is v1.20, which
# fails a chart's kubeVersion constraint). Take it from the release's own go.mod.
gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
[[ -f "$gomod" ]] || { echo "helm: could not download helm.sh/helm/v3@$HELM_VERSION" >&2; exit 1; }
client_go="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")"
[[ -n "$client_go" ]] || { echo "helm: no k8s.io/client-go in $gomod" >&2; exit 1; }
ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
done
exec bash "$TOOL" helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "$ldflags" "version --short"
