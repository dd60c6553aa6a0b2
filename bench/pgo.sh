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
#    runs that `krt`.
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

# The newest llvm-profdata unless one is named.
profdata="${LLVM_PROFDATA:-}"
if [[ -z "$profdata" ]]; then
  for p in $(ls -d /usr/lib/llvm-*/bin/llvm-profdata 2>/dev/null | sort -t- -k2 -n -r) \
    "$(command -v llvm-profdata || true)"; do
    [[ -x "$p" ]] && { profdata="$p"; break; }
  done
fi
[[ -n "$profdata" ]] || { echo "llvm-profdata is required (apt-get install llvm-19)" >&2; exit 1; }

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
build pgo "-Cprofile-use=$counts/merged.profdata"
echo "$target/pgo/release/krt"
