#!/usr/bin/env bash
# A profile-guided release build of `krt` and the bench (docs/benchmarks.md, "Profile-guided
# build").
#
#   bench/pgo.sh [BENCH ARGS...]     # default training: a full kruntimes-bench run
#
# 1. builds `krt` and `kruntimes-bench` (with bare Pingora) instrumented
#    (`-Cprofile-generate`) into the target directory's `pgo-generate/`;
# 2. trains them: one `kruntimes-bench` run with the given arguments (default: every
#    scenario; nginx and HAProxy are used when installed, and their absence only skips
#    them). Every process of the stack — the gateway, runtimed, the control plane, the
#    Runtime Server's shim — and bare Pingora write their counts when they exit;
# 3. merges the counts with `llvm-profdata` and builds the same crates with them
#    (`-Cprofile-use`) into `pgo/`: `$target/pgo/release/krt`, and the bench beside it, which
#    runs that `krt`;
# 4. when `llvm-bolt` is found (Debian 12: `apt-get install bolt-19`; PGO_BOLT=0 skips it),
#    lays the code of `krt` and bare Pingora out again by what runs: step 3 links them with
#    their relocations (`--emit-relocs`, always, so images/build.py's flags never differ),
#    `llvm-bolt -instrument` counts their branches through a second training run with the
#    same arguments, and `llvm-bolt` rewrites them in place with those counts (functions
#    ordered by who calls whom, hot blocks together, cold ones split off). The binaries as
#    step 3 linked them stay beside them as `*.pre-bolt`.
#
# The release profile is the workspace's (fat LTO, one codegen unit), so each build takes as
# long as a cold release build (~20 minutes on 2 cores). The two builds have their own target
# directories because RUSTFLAGS differ: the plain release build's cache stays as it is.
#
# Needs an `llvm-profdata` that reads the raw profiles of rustc's LLVM (`rustc -vV`): LLVM 19
# or newer reads rustc 1.95's (LLVM 22; Debian 12: `apt-get install llvm-19`). Set
# LLVM_PROFDATA to choose one.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
for tool in python3 cargo rustc; do
  command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done

# The newest LLVM tool called $1: Debian's /usr/lib/llvm-N/bin first, then PATH.
newest_llvm() {
  local p
  for p in $(ls -d /usr/lib/llvm-*/bin/"$1" 2>/dev/null | sort -t- -k2 -n -r) \
    "$(command -v "$1" || true)"; do
    [[ -x "$p" ]] && { echo "$p"; return; }
  done
  return 0
}

# The newest llvm-profdata unless one is named.
profdata="${LLVM_PROFDATA:-$(newest_llvm llvm-profdata)}"
[[ -n "$profdata" ]] || { echo "llvm-profdata is required (apt-get install llvm-19)" >&2; exit 1; }

# llvm-bolt and merge-fdata for step 4, the newest unless one is named.
bolt="" merge_fdata=""
if [[ "${PGO_BOLT:-1}" != 0 ]]; then
  bolt="${LLVM_BOLT:-$(newest_llvm llvm-bolt)}"
  if [[ -n "$bolt" ]]; then
    merge_fdata="$(dirname "$bolt")/merge-fdata"
    [[ -x "$merge_fdata" ]] || merge_fdata="$(command -v merge-fdata || true)"
    [[ -n "$merge_fdata" ]] || { echo "merge-fdata is missing beside $bolt" >&2; exit 1; }
  else
    echo "pgo: llvm-bolt not found (apt-get install bolt-19; PGO_BOLT=0 to skip): no BOLT step" >&2
  fi
fi

target="$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 --offline | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
counts="$target/pgo-counts"
rm -rf "$counts"
mkdir -p "$counts"

# The same packages as images/build.py's PGO_PACKAGES: features resolve over the selected
# packages, and the counts only match crates whose features resolved the same way.
build() { # target subdirectory, RUSTFLAGS
  (cd "$ROOT" && CARGO_TARGET_DIR="$target/$1" RUSTFLAGS="$2" \
    cargo build --locked --release -p krt -p kruntimes-bench >&2)
}

echo "pgo: instrumented build" >&2
build pgo-generate "-Cprofile-generate=$counts/raw"
# Build scripts are instrumented too and write counts as they run; only the training's count.
rm -rf "$counts/raw"

echo "pgo: training" >&2
(cd "$ROOT" && "$target/pgo-generate/release/kruntimes-bench" --no-progress "$@" \
  > "$counts/training.md")
shopt -s nullglob
raw=("$counts"/raw/*.profraw)
(( ${#raw[@]} > 0 )) || { echo "the training wrote no profile" >&2; exit 1; }
if ! "$profdata" merge -o "$counts/merged.profdata" "${raw[@]}" 2> "$counts/merge.log"; then
  cat "$counts/merge.log" >&2
  echo "$profdata cannot read rustc's profiles ($(rustc -vV | grep LLVM)); set LLVM_PROFDATA to a newer one" >&2
  exit 1
fi
echo "pgo: ${#raw[@]} profiles merged with $profdata" >&2

echo "pgo: optimised build" >&2
# Linked with their relocations kept, which BOLT needs to move functions; images/build.py
# builds with the same flags, so it reuses this build (and drops them from its copies).
build pgo "-Cprofile-use=$counts/merged.profdata -Clink-arg=-Wl,--emit-relocs"
if [[ -z "$bolt" ]]; then
  echo "$target/pgo/release/krt"
  exit 0
fi

# BOLT rewrites what the build linked: `*.pre-bolt` is that, kept so that a rerun whose build
# was fresh (nothing relinked) starts from it again rather than from a rewritten binary.
release="$target/pgo/release"
bolted=(krt kruntimes-pingora-baseline)
for bin in "${bolted[@]}"; do
  if ! readelf -S "$release/$bin" | grep -q '\.note\.bolt_info'; then
    cp -p "$release/$bin" "$release/$bin.pre-bolt"
  fi
done

echo "pgo: BOLT instrumentation and training" >&2
instrumented="$target/pgo-bolt-instrumented"
rm -rf "$instrumented" "$counts/bolt"
mkdir -p "$instrumented" "$counts/bolt"
cp -p "$release/kruntimes-bench" "$instrumented/"
for bin in "${bolted[@]}"; do
  "$bolt" "$release/$bin.pre-bolt" -o "$instrumented/$bin" -instrument \
    --instrumentation-file="$counts/bolt/$bin.fdata" --instrumentation-file-append-pid \
    > "$counts/bolt/$bin.instrument.log" 2>&1 \
    || { cat "$counts/bolt/$bin.instrument.log" >&2; exit 1; }
done
(cd "$ROOT" && "$instrumented/kruntimes-bench" --no-progress "$@" > "$counts/bolt/training.md")

echo "pgo: BOLT optimisation" >&2
for bin in "${bolted[@]}"; do
  fdata=("$counts/bolt/$bin".fdata.*.fdata)
  (( ${#fdata[@]} > 0 )) || { echo "the BOLT training wrote no profile for $bin" >&2; exit 1; }
  "$merge_fdata" "${fdata[@]}" > "$counts/bolt/$bin.fdata" 2> "$counts/bolt/$bin.merge.log"
  "$bolt" "$release/$bin.pre-bolt" -o "$release/$bin" -data="$counts/bolt/$bin.fdata" \
    -reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold \
    -split-eh -icf=1 -use-gnu-stack -plt=hot -dyno-stats \
    > "$counts/bolt/$bin.optimise.log" 2>&1 \
    || { cat "$counts/bolt/$bin.optimise.log" >&2; exit 1; }
done
echo "pgo: ${bolted[*]} rewritten with $bolt" >&2
echo "$target/pgo/release/krt"
