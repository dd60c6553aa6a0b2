#!/usr/bin/env bash
# Build helm v3, used by the chart tests (kubetest/tests/chart*.rs), from the Go module proxy.
# Cold (empty Go build and module caches, 2 cores): 118 s; warm: returns at once.
#
#   kubetest/helm/build.sh            # build into ~/.cache/kruntimes/tools/helm-<version>/ if missing
#   kubetest/helm/build.sh --print    # print the path of the helm binary (builds nothing)
#
# Either way the last line printed is the binary's path. `go install module@version` builds the
# command from the module's own go.mod (no wrapper module, no replace directives), so the build is
# exactly the released helm; the version string is stamped in as the release build does.
set -euo pipefail

HELM_VERSION="${KRT_HELM_VERSION:-v3.22.0}"
ROOT="${KRT_TOOLS_ROOT:-$HOME/.cache/kruntimes/tools}"
DIR="$ROOT/helm-$HELM_VERSION"
BIN="$DIR/helm"

if [[ "${1:-}" == "--print" ]]; then
  echo "$BIN"
  exit 0
fi

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "helm: the go command is required" >&2; exit 1; }
mkdir -p "$DIR"
# Test processes may run this at the same time: one builds, the others wait for its binary.
exec 9>"$DIR/.build.lock"
flock 9
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
start=$(date +%s)
echo "helm: building helm $HELM_VERSION (about two minutes on cold Go caches)" >&2
# helm's Makefile stamps the Kubernetes version its client libraries speak: it is the default
# `.Capabilities.KubeVersion` of `helm template` and `helm lint` (unstamped it is v1.20, which
# fails a chart's kubeVersion constraint). Take it from the release's own go.mod.
gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
[[ -f "$gomod" ]] || { echo "helm: could not download helm.sh/helm/v3@$HELM_VERSION" >&2; exit 1; }
client_go="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")"
[[ -n "$client_go" ]] || { echo "helm: no k8s.io/client-go in $gomod" >&2; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
done
# GOBIN is the versioned directory itself; go install writes the binary there only once the
# build has succeeded, so an interrupted build leaves nothing that looks installed.
GOBIN="$DIR" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath -ldflags "$ldflags" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$BIN" version --short >&2
echo "helm: built in $(( $(date +%s) - start )) s into $DIR" >&2
echo "$BIN"
