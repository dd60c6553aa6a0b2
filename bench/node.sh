#!/usr/bin/env bash
# kruntimes-bench against the chart on a real node (kubetest/node/cluster.sh): the gateway path
# through the gateway Service's NodePort, beside the path straight to the owner runtimed's Pod;
# and task Runs through the API server, beside the same script as a Job and as a bare Pod per
# task with the Runtime's image (the `tasks` group, with the cluster's admin kubeconfig).
#
#   bench/node.sh [BENCH FLAGS…]      # e.g. --quick, --json node.json, --requests 5000
#   bench/node.sh --only tasks --json node-tasks.json     # only the tasks
#
# Brings a cluster up in a temporary directory with the images of KRT_NODE_IMAGES (default: a
# release build, `images/build.py build --profile release --out target/node-images`, made when
# missing), installs the chart (defaults; gateway Service NodePort 30443), applies an echo
# function Run, grants a ServiceAccount `runs/invoke` and runs kruntimes-bench (release build)
# with a token of it, the published CA bundle, and the gateway's internal identity for the
# direct path. The cluster is stopped at the end (KRT_KEEP_NODE=1 keeps it). As root.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
NS=kruntimes-system
HOST=kruntimes-gateway.$NS.svc
PORT=30443

target="$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 --offline | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
if [[ -z "${KRT_NODE_IMAGES:-}" ]]; then
  export KRT_NODE_IMAGES="$target/node-images/images.json"
  [[ -f "$KRT_NODE_IMAGES" ]] || python3 "$ROOT/images/build.py" build --profile release --out "$target/node-images" >&2
fi
(cd "$ROOT" && cargo build --release --locked -p kruntimes-bench >&2)
bench="$target/release/kruntimes-bench"

dir="$(mktemp -d /tmp/krt-bench-node-XXXXXX)"
cleanup() {
  local status=$?
  if [[ -n "${KRT_KEEP_NODE:-}" ]]; then
    echo "bench: cluster kept: KUBECONFIG=$dir/kubeconfig (stop: kubetest/node/cluster.sh down $dir)" >&2
  elif [[ ! -f "$dir/cluster.env" ]]; then
    # `up` failed (and tore itself down): its logs are kept.
    [[ $status -eq 0 ]] || echo "bench: logs in $dir/logs" >&2
  elif bash "$ROOT/kubetest/node/cluster.sh" down "$dir" >&2 && [[ $status -eq 0 ]]; then
    rm -rf "$dir"
  else
    echo "bench: logs kept in $dir/logs" >&2
  fi
}
trap cleanup EXIT
bash "$ROOT/kubetest/node/cluster.sh" up "$dir" >&2
# shellcheck disable=SC1091
source "$dir/cluster.env"
k() { "$BIN/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }
helm="$(bash "$ROOT/kubetest/helm/build.sh")"

k create namespace "$NS" >/dev/null
"$helm" install kruntimes "$ROOT/charts/kruntimes" -n "$NS" --kubeconfig "$dir/kubeconfig" \
  --set gateway.service.type=NodePort --set gateway.service.httpsNodePort=$PORT --wait --timeout 5m >/dev/null

# The gateway paths need the echo Run, which holds one of the python Pod's slots: an `--only`
# without `sequential` and `open-loop` leaves it out, and the tasks have every slot.
only="" prev=""
for arg in "$@"; do
  case "$arg" in --only=*) only="${arg#--only=}" ;; esac
  [[ "$prev" == --only ]] && only="$arg"
  prev="$arg"
done
if [[ -n "$only" && ",$only," != *,sequential,* && ",$only," != *,open-loop,* ]]; then
  echo "bench: node $NODE_IP, $only through the API server" >&2
  "$bench" --kubeconfig "$dir/kubeconfig" "$@"
  exit
fi

k create namespace bench >/dev/null
k apply -f - >/dev/null <<'YAML'
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata: {name: echo, namespace: bench}
spec:
  runtime: python
  source:
    inlinePath: main.py
    inline: |
      def invoke(request):
          return request
  mode:
    function:
      handler: main.invoke
YAML
k create serviceaccount caller -n bench >/dev/null
k create rolebinding caller -n bench --clusterrole=kruntimes-run-invoker --serviceaccount=bench:caller >/dev/null
k wait -n bench krun/echo --for=jsonpath='{.status.phase}'=Ready --timeout=3m >/dev/null

field() { k get krun echo -n bench -o jsonpath="{$1}"; }
uid="$(field .metadata.uid)"
pod="$(field .status.assignedPod)"
pod_uid="$(field .status.assignedPodUID)"
attempt="$(field .status.attempt)"
pod_ip="$(k get pod -n "$NS" "$pod" -o jsonpath='{.status.podIP}')"
k get configmap -n "$NS" kruntimes-gateway-ca -o jsonpath='{.data.ca\.crt}' >"$dir/public-ca.crt"
mkdir -p "$dir/internal"
for key in ca.crt tls.crt tls.key; do
  k get secret -n "$NS" kruntimes-internal-gateway -o jsonpath="{.data.${key//./\\.}}" | base64 -d >"$dir/internal/$key"
done
chmod 600 "$dir/internal/tls.key"
# The token goes to the bench through its environment, never its command line (ps shows that).
KRUNTIMES_BENCH_TOKEN="$(k create token caller -n bench --audience kruntimes-gateway --duration 2h)"
export KRUNTIMES_BENCH_TOKEN

echo "bench: node $NODE_IP, gateway https://$HOST:$PORT (NodePort), owner $pod ($pod_ip)" >&2
"$bench" --gateway "https://$HOST:$PORT" --resolve "$HOST:$PORT:$NODE_IP" --ca "$dir/public-ca.crt" \
  --endpoint "/v1/namespaces/bench/runtimes/python/runs/$uid:invoke" \
  --direct "$pod_ip:7443" --internal-pki "$dir/internal" --owner-pod-uid "$pod_uid" --attempt "$attempt" \
  --kubeconfig "$dir/kubeconfig" "$@"
