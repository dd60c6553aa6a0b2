#!/usr/bin/env bash
# Heap allocations per request of the gateway and of bare Pingora, counted by valgrind's DHAT
# (docs/benchmarks.md, "Allocations per request").
#
#   bench/allocations.sh [N1 N2]     # default 200 1200 requests
#
# Builds `krt` and the bench's bare Pingora with the system allocator (feature
# `kruntimes-alloc/system`: DHAT sees only malloc and free, and mimalloc takes its memory from
# the OS) into their own target directory, starts a `krt up` stack with the example Runs, then
# runs a second gateway of that stack and bare Pingora (in front of the same owner runtimed,
# with the fencing headers) under DHAT, twice each: N1 and N2 sequential invocations of
# `hello-python` over one HTTP/2 connection (h2load). (blocks(N2) - blocks(N1)) / (N2 - N1) is
# the count per request, without start-up. Needs valgrind and h2load (Debian packages
# `valgrind`, `nghttp2-client`). Allocation counts, not times: valgrind runs the code ~50×
# slower, and the build is the dev profile (the same allocations as a release build; the
# figures are counted, not timed).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
N1=${1:-200}
N2=${2:-1200}
RUN=hello-python
for tool in valgrind h2load curl python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install valgrind nghttp2-client curl)" >&2; exit 1; }
done

target="$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 --offline | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/alloc-count"
(cd "$ROOT" && CARGO_TARGET_DIR="$target" cargo build --locked -p krt -p kruntimes-bench \
  --features kruntimes-alloc/system >&2)
krt="$target/debug/krt"
pingora="$target/debug/kruntimes-pingora-baseline"

dir="$(mktemp -d /tmp/krt-alloc-XXXXXX)"
state="$dir/state"
up=""
cleanup() {
  [[ -n "$up" ]] && kill "$up" 2>/dev/null && wait "$up" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
stack_port=$(port)
(cd "$ROOT" && exec "$krt" up --runs examples/runs --state-dir "$state" \
  --gateway-addr "127.0.0.1:$stack_port" > "$dir/up.log" 2>&1) &
up=$!
for _ in $(seq 180); do grep -q "kruntimes ready" "$dir/up.log" && break; sleep 1; done
grep -q "kruntimes ready" "$dir/up.log" || { cat "$dir/up.log" >&2; echo "krt up did not get ready" >&2; exit 1; }

# The stack's gateway, as krt up started it, on other ports.
gw_pid=$(pgrep -f "$krt gateway --exit-with-parent" | head -1)
mapfile -d '' stack_args < "/proc/$gw_pid/cmdline"
gw_port=$(port)
pg_port=$(port)
gateway=()
prev=""
for a in "${stack_args[@]:1}"; do
  case "$prev" in
    --https-listen) a="127.0.0.1:$gw_port" ;;
    --metrics-listen) a="127.0.0.1:$(port)" ;;
  esac
  prev=$a
  [[ "$a" == "--exit-with-parent" ]] || gateway+=("$a")
done

read -r run_uid pod_uid attempt owner path < <(python3 - "$state" "$RUN" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/runs.json"))
r = next(x for x in d["runs"] if x["name"] == sys.argv[2])
addr = next(p for p in d["pods"] if p["name"] == r["assignedPod"])["address"]
print(r["uid"], r["assignedPodUid"], r["attempt"], addr, "/" + r["endpoint"].split("/", 3)[3])
PY
)
token=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['token'])" "$state/client.json")
pki="$state/pki"
bare=(--listen "127.0.0.1:$pg_port" --cert "$pki/gateway.crt" --key "$pki/gateway.key"
  --upstream "$owner" --upstream-ca "$pki/internal-ca.crt"
  --client-cert "$pki/gateway-client.crt" --client-key "$pki/gateway-client.key"
  --server-name runtimed.kruntimes.internal --upstream-protocol h1 --threads 1
  --header "x-kruntimes-run-uid=$run_uid" --header "x-kruntimes-owner-pod-uid=$pod_uid"
  --header "x-kruntimes-attempt=$attempt" --header x-kruntimes-hop=gateway)
echo '{"name":"alloc"}' > "$dir/body.json"

# measure NAME PORT N HEADER CMD…: N invocations through CMD under DHAT, with HEADER if set.
measure() {
  local name=$1 p=$2 n=$3 extra=()
  [[ -n "$4" ]] && extra=(-H "$4")
  shift 4
  valgrind --tool=dhat --dhat-out-file="$dir/$name.$n.json" "$@" > "$dir/$name.$n.log" 2>&1 &
  local v=$!
  local url="https://127.0.0.1:$p$path"
  local ready=""
  for _ in $(seq 240); do
    code=$(curl -sk -o /dev/null -w '%{http_code}' -H "authorization: Bearer $token" \
      "${extra[@]}" -H 'content-type: application/json' -d @"$dir/body.json" "$url" || true)
    [[ "$code" == 200 ]] && { ready=1; break; }
    sleep 0.5
  done
  [[ -n "$ready" ]] || { kill -INT "$v"; cat "$dir/$name.$n.log" >&2; echo "$name never answered 200" >&2; exit 1; }
  h2load -n "$n" -c 1 -m 1 -H "authorization: Bearer $token" "${extra[@]}" \
    -H 'content-type: application/json' -d "$dir/body.json" "$url" > "$dir/$name.$n.h2load"
  grep -q "^status codes: $n 2xx" "$dir/$name.$n.h2load" \
    || { cat "$dir/$name.$n.h2load" >&2; echo "$name: not every answer was a 200" >&2; }
  kill -INT "$v"
  wait "$v" || true
}
# Bare Pingora sends what the gateway would add: one invocation id for all (runtimed answers a
# repeated id from its idempotency record, which does not change what the proxy allocates).
for n in "$N1" "$N2"; do
  measure gateway "$gw_port" "$n" "" "$krt" "${gateway[@]}"
  measure pingora "$pg_port" "$n" "x-kruntimes-invocation-id: 0d4c0f4e-3a51-4a59-9a7e-6f3c1b2a9e01" \
    "$pingora" "${bare[@]}"
done

python3 - "$dir" "$N1" "$N2" <<'PY'
import collections, json, re, sys
d, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def sites(path):
    """Blocks and bytes per allocation site: the innermost frame of ours (kruntimes, moka),
    else '(Pingora, h2, rustls, tokio, …)'."""
    dh = json.load(open(path))
    ftbl = dh["ftbl"]
    blocks, size = collections.Counter(), collections.Counter()
    for pp in dh["pps"]:
        names = [re.sub(r"^0x[0-9A-F]+: ", "", ftbl[i]).split(" (")[0] for i in pp["fs"]]
        ours = next((i for i, f in enumerate(names) if re.search(r"kruntimes|moka", f)), None)
        key = "(Pingora, h2, rustls, tokio, …)" if ours is None else names[ours][:110]
        blocks[key] += pp["tbk"]
        size[key] += pp["tb"]
    return blocks, size

per = {}
for name in ("gateway", "pingora"):
    (b1, s1), (b2, s2) = sites(f"{d}/{name}.{n1}.json"), sites(f"{d}/{name}.{n2}.json")
    rows = {k: ((b2[k] - b1[k]) / (n2 - n1), (s2[k] - s1[k]) / (n2 - n1)) for k in b2}
    per[name] = rows
    blocks = sum(r[0] for r in rows.values())
    size = sum(r[1] for r in rows.values())
    print(f"{name}: {blocks:.1f} allocations, {size / 1024:.1f} KiB per request")
print("\ngateway, by innermost frame of ours (allocations / bytes per request):")
for k, (b, s) in sorted(per["gateway"].items(), key=lambda kv: -kv[1][0]):
    if b >= 0.5:
        print(f"  {b:6.1f} {s:9.0f}  {k}")
PY
