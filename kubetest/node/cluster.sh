#!/usr/bin/env bash
# A single-node Kubernetes cluster from real components, for the end-to-end tests and by hand.
#
#   kubetest/node/cluster.sh up DIR      # build what is missing, start, wait until usable
#   kubetest/node/cluster.sh down DIR    # stop everything `up` started and remove what it made
#   kubetest/node/cluster.sh status DIR  # the cluster's addresses and processes
#
# The node runs in a network namespace of its own (as kind runs a node in a container): a veth
# pair joins it to the host, 10.213.N.1 on the host side and 10.213.N.2 (the node's InternalIP,
# the API server's advertise address, the NodePorts) inside. etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, the kubelet (cgroupfs driver), containerd + runc and
# kube-proxy (iptables) all run inside it, so every port they open belongs to that namespace;
# Pods get 10.214.N.0/24 from Debian's bridge CNI plugin (routed from the host through the node), Services 10.215.0.0/24, and CoreDNS
# runs as a Deployment (10.215.0.10). Processes share the host's mount namespace (nsenter
# --net only), so the kubelet's volume mounts are the ones containerd sees.
#
# Nothing is pulled: every image is imported from the project's image builder (images/build.py:
# the kruntimes images, pause and CoreDNS). Everything lives under DIR: PKI, kubeconfigs (the
# admin one is DIR/kubeconfig), configs, state, logs (DIR/logs/*.log); DIR/cluster.env holds
# the addresses for scripts and the Rust harness (kruntimes_kubetest::node).
#
# Environment: KRT_NODE_IMAGES (an images.json of images/build.py, default: the last build in
# the cargo target directory, built when missing), KRT_NODE_TIMEOUT (seconds to wait for each
# step, default 180).
set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NODE_NAME=krt-node
POD_CIDR_PREFIX=10.214
SERVICE_CIDR=10.215.0.0/24
KUBERNETES_SERVICE_IP=10.215.0.1
DNS_IP=10.215.0.10
CLUSTER_DOMAIN=cluster.local
TIMEOUT="${KRT_NODE_TIMEOUT:-180}"
LOCK=/run/kruntimes-node-cluster.lock

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# --- helpers --------------------------------------------------------------------------------

# Runs a command inside the node's network namespace (only the network: same mounts, same PIDs).
in_node() { nsenter --net="/run/netns/$NETNS" -- "$@"; }

# Starts NAME in the node's network namespace, in a session of its own, logging to logs/NAME.log.
start() {
  local name=$1
  shift
  log "starting $name"
  setsid nsenter --net="/run/netns/$NETNS" -- "$@" >"$DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$DIR/pids/$name.pid"
}

# Whether PID runs (a process that exited but was not reaped yet does not).
alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" && [[ -n "$state" && "$state" != Z ]]
}

# Waits until `$@` succeeds, or fails naming WHAT and the log to read.
wait_for() {
  local what=$1 logname=$2
  shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$logname" && -f "$DIR/pids/$logname.pid" ]] && ! alive "$(cat "$DIR/pids/$logname.pid")"; then
      tail -n 30 "$DIR/logs/$logname.log" >&2 || true
      die "$logname exited while waiting for $what (log: $DIR/logs/$logname.log)"
    fi
    if ((SECONDS > deadline)); then
      [[ -n "$logname" ]] && tail -n 30 "$DIR/logs/$logname.log" >&2
      die "timed out after ${TIMEOUT}s waiting for $what${logname:+ (log: $DIR/logs/$logname.log)}"
    fi
    sleep 0.5
  done
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }

# Every key of cluster.env, loaded into the shell.
load_env() {
  [[ -f "$DIR/cluster.env" ]] || die "$DIR/cluster.env is missing: no cluster was brought up in $DIR"
  # shellcheck disable=SC1091
  source "$DIR/cluster.env"
}

# --- preflight ------------------------------------------------------------------------------

preflight() {
  [[ $EUID -eq 0 ]] || die "must run as root (network namespaces, mounts, cgroups)"
  local missing=()
  for cmd in ip nsenter setsid openssl containerd containerd-shim-runc-v2 runc ctr iptables \
      python3 curl go mount umount flock; do
    command -v "$cmd" >/dev/null || missing+=("$cmd")
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback && -x /usr/lib/cni/portmap ]] \
    || missing+=("/usr/lib/cni/{bridge,host-local,loopback,portmap}")
  ((${#missing[@]} == 0)) || die "missing: ${missing[*]} (Debian: apt-get install iproute2 util-linux openssl containerd runc iptables containernetworking-plugins python3 curl)"
  [[ -d /sys/fs/cgroup/pids && -d /sys/fs/cgroup/memory ]] || die "the cgroup v1 hierarchy (/sys/fs/cgroup/{pids,memory,…}) is required: the kubelet runs with the cgroupfs driver"
}

# --- build ----------------------------------------------------------------------------------

build() {
  bash "$ROOT/kubetest/envtest/build.sh" --node >&2
  BIN="$(bash "$ROOT/kubetest/envtest/build.sh" --print)"
  IMAGES_JSON="${KRT_NODE_IMAGES:-}"
  if [[ -z "$IMAGES_JSON" ]]; then
    local target
    target="$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 --offline | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
    IMAGES_JSON="$target/images/images.json"
    if ! images_complete "$IMAGES_JSON"; then
      log "building the images (images/build.py build --profile dev)"
      python3 "$ROOT/images/build.py" build --profile dev >&2
    fi
  fi
  images_complete "$IMAGES_JSON" || die "$IMAGES_JSON does not list every image with its archive (python3 images/build.py build)"
}

# images.json lists pause, coredns and the chart's images, and every archive exists.
images_complete() {
  [[ -f "$1" ]] && python3 - "$1" <<'PY'
import json, os, sys
images = json.load(open(sys.argv[1]))
names = {i["name"] for i in images}
need = {"pause", "coredns", "versitygw", "operator", "gateway", "runtimed", "runtime-python", "runtime-bash"}
sys.exit(0 if need <= names and all(os.path.isfile(i["archive"]) for i in images) else 1)
PY
}

image_ref() {
  python3 -c 'import json,sys; print(next(i["ref"] for i in json.load(open(sys.argv[1])) if i["name"] == sys.argv[2]))' "$IMAGES_JSON" "$1"
}

# --- network --------------------------------------------------------------------------------

network_up() {
  # The host side's /24 is the one thing two clusters on a machine must not share.
  exec 9>"$LOCK"
  flock 9
  local n free=
  for n in $(seq 0 99); do
    if ! ip -4 -o addr show | grep -q " 10\.213\.$n\.1/"; then
      free=$n
      break
    fi
  done
  [[ -n "$free" ]] || die "no free 10.213.N.0/24 for the node's veth pair"
  n=$free
  ID="$(printf '%s' "$DIR" | sha1sum | cut -c1-8)"
  NETNS="krt-$ID"
  HOST_IF="krt${ID}h"
  HOST_IP="10.213.$n.1"
  NODE_IP="10.213.$n.2"
  POD_CIDR="$POD_CIDR_PREFIX.$n.0/24"
  ip netns list | grep -qw "$NETNS" && die "network namespace $NETNS exists: run \`$0 down $DIR\` first"
  cat >"$DIR/cluster.env" <<EOF
# Written by kubetest/node/cluster.sh up; read by down, status and kruntimes_kubetest::node.
DIR=$DIR
BIN=$BIN
IMAGES_JSON=$IMAGES_JSON
ID=$ID
NETNS=$NETNS
HOST_IF=$HOST_IF
HOST_IP=$HOST_IP
NODE_IP=$NODE_IP
NODE_NAME=$NODE_NAME
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
DNS_IP=$DNS_IP
CLUSTER_DOMAIN=$CLUSTER_DOMAIN
APISERVER=https://$NODE_IP:6443
CGROUP_ROOT=/krt-$ID
EOF
  log "network namespace $NETNS: node $NODE_IP, host $HOST_IP ($HOST_IF)"
  ip netns add "$NETNS"
  ip link add "$HOST_IF" type veth peer name eth0 netns "$NETNS"
  ip addr add "$HOST_IP/24" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  in_node ip link set lo up
  in_node ip addr add "$NODE_IP/24" dev eth0
  in_node ip link set eth0 up
  in_node ip route add default via "$HOST_IP"
  # The host reaches Pods through the node, as a machine on a node's network would.
  ip route add "$POD_CIDR" via "$NODE_IP" dev "$HOST_IF"
  flock -u 9
  in_node sysctl -qw net.ipv4.ip_forward=1
  # Bridged Pod-to-Pod replies through a Service's DNAT must pass iptables (br_netfilter).
  if [[ ! -e /proc/sys/net/bridge ]]; then modprobe br_netfilter 2>/dev/null || true; fi
  if in_node test -e /proc/sys/net/bridge/bridge-nf-call-iptables; then
    in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1
  else
    log "warning: br_netfilter is not available: a Pod reaching a Service backed by a Pod on the same bridge may see its reply dropped"
  fi
}

# --- PKI and kubeconfigs --------------------------------------------------------------------

issue() {  # NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
  local name=$1 subject=$2 eku=$3 sans=${4:-}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "$subject" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -n "$sans" ]] && echo "subjectAltName=$sans"
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

kubeconfig() {  # FILE USER
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: krt
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: krt
  context: {cluster: krt, user: $2}
current-context: krt
EOF
}

pki() {
  PKI="$DIR/pki"
  mkdir -p "$PKI"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -sha256 \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -subj "/CN=kruntimes test node CA" 2>/dev/null
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  issue apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  issue admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  issue controller-manager "/CN=system:kube-controller-manager" clientAuth
  issue scheduler "/CN=system:kube-scheduler" clientAuth
  issue kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  issue kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
  issue kube-proxy "/CN=system:kube-proxy" clientAuth
  kubeconfig "$DIR/kubeconfig" admin
  for user in controller-manager scheduler kubelet kube-proxy; do
    kubeconfig "$DIR/$user.kubeconfig" "$user"
  done
}

# --- components -----------------------------------------------------------------------------

control_plane() {
  start etcd "$BIN/etcd" --name=node --data-dir="$DIR/etcd" \
    --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster=node=http://127.0.0.1:2380 --unsafe-no-fsync --log-level=warn
  wait_for "etcd" etcd in_node curl -sf http://127.0.0.1:2379/health
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port=6443 \
    --cert-dir="$DIR/apiserver-certs" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --service-node-port-range=30000-32767 \
    --allow-privileged=false --profiling=false --v=1
  wait_for "kube-apiserver /readyz" kube-apiserver \
    curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://$NODE_IP:6443/readyz"
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allocate-node-cidrs=false \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' \
    --profiling=false --v=1
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false --v=1
}

containerd_up() {
  local c="$DIR/containerd" pause
  pause="$(image_ref pause)"
  mkdir -p "$c" "$DIR/cni/net.d" "$DIR/cni/ipam"
  # restrict_oom_score_adj: root here may lack CAP_SYS_RESOURCE, and runc would fail every
  # sandbox writing a lower oom_score_adj than its own.
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
    max_conf_num = 1
EOF
  cat >"$DIR/cni/net.d/10-krt.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "krt",
  "plugins": [
    {
      "type": "bridge", "bridge": "krt0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd containerd --config "$c/config.toml"
  wait_for "containerd" containerd ctr --address "$c/containerd.sock" version
  local archive
  for archive in $(python3 -c 'import json,sys; print(" ".join(i["archive"] for i in json.load(open(sys.argv[1]))))' "$IMAGES_JSON"); do
    log "importing $(basename "$archive")"
    ctr --address "$c/containerd.sock" -n k8s.io images import --no-unpack "$archive" >/dev/null
  done
}

node_up() {
  local cgroup_root="/krt-$ID" controller
  # The kubelet's cgroup root: one per cluster, so `down` can find every process it started.
  for controller in /sys/fs/cgroup/*/; do
    [[ -e "$controller/cgroup.procs" ]] && mkdir -p "$controller/krt-$ID"
  done
  mkdir -p "$DIR/kubelet" "$DIR/pod-logs"
  echo "# no upstream resolver: the cluster reaches nothing outside it" >"$DIR/resolv.conf"
  cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://$DIR/containerd/containerd.sock
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$DNS_IP]
resolvConf: $DIR/resolv.conf
podLogsDir: $DIR/pod-logs
failSwapOn: false
failCgroupV1: false
protectKernelDefaults: false
makeIPTablesUtilChains: true
serializeImagePulls: false
# Nothing can be pulled again: no image may be collected, and the shared disk of these
# machines must not set DiskPressure.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
maxPods: 110
shutdownGracePeriod: 0s
# Mounted Secrets and ConfigMaps follow their objects within ~10 s (default: a minute): the
# certificate-rotation tests wait for it.
syncFrequency: 10s
EOF
  start kubelet "$BIN/kubelet" --config="$DIR/kubelet.yaml" --kubeconfig="$DIR/kubelet.kubeconfig" \
    --root-dir="$DIR/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
  cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $DIR/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$NODE_IP/32]
# The node's namespace may not set the machine-wide conntrack table size or timeouts.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$BIN/kube-proxy" --config="$DIR/kube-proxy.yaml" --v=1
  wait_for "node $NODE_NAME Ready" kubelet \
    bash -c "'$BIN/kubectl' --kubeconfig '$DIR/kubeconfig' get node '$NODE_NAME' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
}

coredns_up() {
  local image
  image="$(image_ref coredns)"
  sed -e "s|@IMAGE@|$image|" -e "s|@DNS_IP@|$DNS_IP|" -e "s|@DOMAIN@|$CLUSTER_DOMAIN|" \
    "$HERE/coredns.yaml" | kubectl_admin apply -f - >/dev/null
  wait_for "CoreDNS available" kubelet kubectl_admin -n kube-system wait deployment/coredns \
    --for=condition=Available --timeout=5s
  wait_for "CoreDNS answering kubernetes.default.svc.$CLUSTER_DOMAIN" "" \
    in_node python3 "$HERE/dns_query.py" "$DNS_IP" "kubernetes.default.svc.$CLUSTER_DOMAIN" "$KUBERNETES_SERVICE_IP"
}

up() {
  preflight
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  [[ -f "$DIR/cluster.env" ]] && die "$DIR holds a cluster: run \`$0 down $DIR\` first"
  local started=$SECONDS
  build
  mkdir -p "$DIR/logs" "$DIR/pids"
  # Whatever fails from here leaves nothing running.
  trap 'log "up failed: tearing down (logs in $DIR/logs)"; down_quiet; rm -f "$DIR/cluster.env"' EXIT
  network_up
  pki
  control_plane
  containerd_up
  node_up
  coredns_up
  trap - EXIT
  log "up in $((SECONDS - started)) s: KUBECONFIG=$DIR/kubeconfig kubectl get pods -A"
}

# --- down -----------------------------------------------------------------------------------

# Whatever runs in the kubelet's cgroup root: every container.
cgroup_pids() {
  grep -lsE ":/krt-$ID(/|\$)" /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3
  return 0
}

# Every process of the cluster besides those with a pid file: the containers and the
# containerd shims (their command line names this cluster's containerd socket). The pattern
# writes every `.` as `[.]`, so grep's own command line never matches it.
cluster_pids() {
  local pattern
  pattern="$(printf '%s' "$DIR/containerd/containerd.sock" | sed -e 's/[][\\^$*+?(){}|]/\\&/g' -e 's/[.]/[.]/g')"
  cgroup_pids
  grep -lsaE -- "$pattern" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3
  return 0
}

# Whether PID is a process of this cluster: alive and in the node's network namespace (a pid
# file of a component that died long ago may name a reused PID).
ours() {
  alive "$1" && [[ "$(stat -L -c %i "/proc/$1/ns/net" 2>/dev/null)" == "$(stat -L -c %i "/run/netns/$NETNS" 2>/dev/null)" ]]
}

# Signals the processes of the named pid files (those still ours).
signal_pid_files() {
  local signal=$1 name pid
  shift
  for name in "$@"; do
    [[ -f "$DIR/pids/$name.pid" ]] || continue
    pid="$(cat "$DIR/pids/$name.pid")"
    ours "$pid" && kill "-$signal" "$pid" 2>/dev/null
  done
  return 0
}

# Waits up to SECONDS until `$@` prints nothing.
settle() {
  local deadline=$((SECONDS + $1))
  shift
  while [[ -n "$("$@")" ]] && ((SECONDS < deadline)); do sleep 0.2; done
}

pid_files_alive() {
  local f
  for f in "$DIR"/pids/*.pid; do
    [[ -f "$f" ]] && ours "$(cat "$f")" && echo "$f"
  done
  return 0
}

# The node agents still running.
agents_alive() {
  local name
  for name in kubelet kube-proxy kube-scheduler kube-controller-manager; do
    [[ -f "$DIR/pids/$name.pid" ]] && ours "$(cat "$DIR/pids/$name.pid")" && echo "$name"
  done
  return 0
}

stop_all() {
  local pid
  # The node's agents first, so nothing restarts what is being stopped; then every container
  # (a teardown: SIGKILL), their shims and containerd; the API server and etcd last, killed
  # (their state is thrown away, and a terminating API server drains for many seconds).
  signal_pid_files TERM kubelet kube-proxy kube-scheduler kube-controller-manager
  settle 5 agents_alive
  signal_pid_files KILL kubelet kube-proxy kube-scheduler kube-controller-manager
  for pid in $(cgroup_pids); do kill -KILL "$pid" 2>/dev/null; done
  settle 10 cgroup_pids
  for pid in $(cluster_pids); do kill -TERM "$pid" 2>/dev/null; done
  signal_pid_files TERM containerd
  settle 5 cluster_pids
  for pid in $(cluster_pids); do kill -KILL "$pid" 2>/dev/null; done
  signal_pid_files KILL kube-apiserver etcd
  settle 5 pid_files_alive
  signal_pid_files KILL kubelet kube-proxy kube-scheduler kube-controller-manager containerd kube-apiserver etcd
  settle 5 pid_files_alive
  rm -f "$DIR"/pids/*.pid
}

down_quiet() {
  set +e
  [[ -n "${ID:-}" ]] || return 0
  stop_all
  # Mounts under DIR (the kubelet's volumes, containerd's rootfs, snapshots and Pod network
  # namespaces), deepest first.
  local m
  for m in $(awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-); do
    umount -l "$m" 2>/dev/null
  done
  # The node's namespace: its veth (and the host's end with it), its bridge and every iptables
  # rule kube-proxy and the kubelet wrote go with it.
  ip netns del "$NETNS" 2>/dev/null
  ip link del "$HOST_IF" 2>/dev/null
  local controller
  for controller in /sys/fs/cgroup/*/; do
    [[ -d "$controller/krt-$ID" ]] && find "$controller/krt-$ID" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  # The container images and snapshots (hundreds of MB); the logs stay for reading.
  rm -rf "$DIR/containerd/root" "$DIR/containerd/state" "$DIR/etcd" "$DIR/kubelet"
  set -e
}

down() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  [[ -d "$DIR" ]] || die "$DIR does not exist"
  DIR="$(cd "$DIR" && pwd)"
  load_env
  down_quiet
  local left
  left="$(cluster_pids | tr '\n' ' ')"
  [[ -z "$left" ]] || die "processes left running: $left"
  ! awk -v d="$DIR/" 'index($2, d) == 1' /proc/self/mounts | grep -q . || die "mounts left under $DIR"
  ! ip netns list | grep -qw "$NETNS" || die "network namespace $NETNS left"
  # Only now: a `down` that left something can be run again.
  rm -f "$DIR/cluster.env"
  log "down: $DIR (logs kept in $DIR/logs)"
}

status() {
  DIR="$(cd "$DIR" && pwd)"
  load_env
  cat "$DIR/cluster.env"
  local name
  for name in "$DIR"/pids/*.pid; do
    [[ -f "$name" ]] || continue
    printf '%-24s pid %-8s %s\n' "$(basename "$name" .pid)" "$(cat "$name")" \
      "$(alive "$(cat "$name")" && echo running || echo exited)"
  done
}

[[ $# -eq 2 ]] || usage
DIR=$2
case "$1" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) usage ;;
esac
