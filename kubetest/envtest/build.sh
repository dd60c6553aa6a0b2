#!/usr/bin/env bash
# Build the real kube-apiserver and etcd used by the Kubernetes tests, from the Go module proxy.
#
#   kubetest/envtest/build.sh            # build into ~/.cache/kruntimes/envtest/<version>/ if missing
#   kubetest/envtest/build.sh --node     # also the node's components (kubetest/node/cluster.sh):
#                                        # kube-controller-manager, kube-scheduler, kubelet,
#                                        # kube-proxy and kubectl
#   kubetest/envtest/build.sh --print    # print the directory the binaries live in
#
# kube-apiserver: k8s.io/kubernetes is not meant to be a dependency — its go.mod replaces every
# staging module (k8s.io/api, k8s.io/apiserver, …) with a directory inside the repository. A small
# wrapper module requires k8s.io/kubernetes and replaces each of those staging modules with its
# published twin v0.<minor>.<patch>; the list is generated from the version's own go.mod so it
# cannot drift. etcd is built the same way from go.etcd.io/etcd/server/v3 (Debian's etcd-server is
# 3.4, older than this API server supports).
set -euo pipefail

KUBE_VERSION="${KRT_KUBE_VERSION:-v1.34.4}"
ETCD_VERSION="${KRT_ETCD_VERSION:-v3.6.16}"
ROOT="${KRT_ENVTEST_ROOT:-$HOME/.cache/kruntimes/envtest}"
DIR="$ROOT/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"

NODE_COMPONENTS=(kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

node=false
case "${1:-}" in
  --print) echo "$DIR"; exit 0 ;;
  --node) node=true ;;
  "") ;;
  *) echo "usage: $0 [--node|--print]" >&2; exit 2 ;;
esac

wanted=(kube-apiserver etcd)
$node && wanted+=("${NODE_COMPONENTS[@]}")
missing=()
for binary in "${wanted[@]}"; do
  [[ -x "$DIR/$binary" ]] || missing+=("$binary")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "envtest: binaries present in $DIR"
  exit 0
fi
want() { [[ " ${missing[*]} " == *" $1 "* ]]; }

command -v go >/dev/null || { echo "envtest: the go command is required" >&2; exit 1; }
mkdir -p "$DIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

# --- Kubernetes components ------------------------------------------------------------------
kube_missing=()
for binary in kube-apiserver "${NODE_COMPONENTS[@]}"; do
  want "$binary" && kube_missing+=("$binary")
done
minor_patch="${KUBE_VERSION#v1.}"            # 34.4
staging_version="v0.$minor_patch"            # v0.34.4
kmod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
[[ -f "$kmod" ]] || { echo "envtest: could not download k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }

mkdir -p "$work/kube"
{
  echo "module kruntimes.io/envtest/kube"
  echo
  grep -E '^go [0-9]' "$kmod"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  echo "replace ("
  # Lines such as `k8s.io/api => ./staging/src/k8s.io/api` become `k8s.io/api => k8s.io/api v0.34.4`.
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\t\1 => \1 '"$staging_version"'#p' "$kmod"
  echo ")"
} > "$work/kube/go.mod"
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  for binary in "${kube_missing[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$binary\""; done
} > "$work/kube/tools.go"
if [[ ${#kube_missing[@]} -gt 0 ]]; then
  echo "envtest: resolving ${kube_missing[*]} $KUBE_VERSION ($(grep -c '=>' "$work/kube/go.mod") staging replacements)"
  (cd "$work/kube" && go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$work/kube" && go get "k8s.io/kubernetes@$KUBE_VERSION" >/dev/null)
  for binary in "${kube_missing[@]}"; do
    echo "envtest: building $binary (minutes on a cold cache)"
    (cd "$work/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=${minor_patch%%.*}" \
      -o "$DIR/$binary.tmp" "k8s.io/kubernetes/cmd/$binary")
    mv "$DIR/$binary.tmp" "$DIR/$binary"
  done
fi

# --- etcd -----------------------------------------------------------------------------------
if want etcd; then
mkdir -p "$work/etcd"
cat > "$work/etcd/go.mod" <<GOMOD
module kruntimes.io/envtest/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
cat > "$work/etcd/main.go" <<'GO'
// etcd's own main: the server module exposes it as etcdmain.Main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
echo "envtest: building etcd $ETCD_VERSION"
(cd "$work/etcd" && go mod tidy >/dev/null && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$DIR/etcd.tmp" .)
mv "$DIR/etcd.tmp" "$DIR/etcd"
fi


for binary in "${missing[@]}"; do
  case "$binary" in
    etcd) "$DIR/etcd" --version | head -1 ;;
    kubectl) "$DIR/kubectl" version --client | head -1 ;;
    *) "$DIR/$binary" --version ;;
  esac
done
echo "envtest: built in $(( $(date +%s) - start )) s into $DIR"
