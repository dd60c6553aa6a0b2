#!/usr/bin/env bash
# A burst of task Runs on `krt up`: N copies of task.yaml (task-0001 … task-N) created in one
# `krt apply`, followed with `krt runs` until every one has ended; prints how many succeeded,
# how long the burst took and the rate, then deletes them.
#
#   krt up &                               # in another terminal, or as you run it
#   examples/tasks/burst.sh [N]            # default 100
#   KEEP=1 examples/tasks/burst.sh 1000    # leave the Runs (`krt runs` shows their exit codes)
#
# KRT names the krt binary (default: `krt` on PATH); KRUNTIMES_STATE_DIR the stack, as for krt.
# The bench measures the same burst per task, split into its parts: kruntimes-bench --only tasks.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N="${1:-100}"
KRT="${KRT:-krt}"

file="$(mktemp /tmp/krt-tasks-XXXXXX.yaml)"
trap 'rm -f "$file"' EXIT
for i in $(seq -f '%04g' 1 "$N"); do
  sed "s/^  name: task\$/  name: task-$i/" "$HERE/task.yaml"
  echo '---'
done >"$file"

# Counts the burst's Runs by how they stand: "ended succeeded".
count() {
  "$KRT" runs -o json | python3 -c '
import json, sys
runs = [r for r in json.load(sys.stdin) if r["name"].startswith("task-")]
ended = [r for r in runs if r["phase"] in ("Succeeded", "Failed", "Timeout", "Cancelled")]
ok = [r for r in ended if r["phase"] == "Succeeded" and (r.get("task") or {}).get("exitCode") == 0]
print(len(ended), len(ok))'
}

start="$(date +%s.%N)"
"$KRT" apply -f "$file" >/dev/null
while :; do
  read -r ended ok < <(count)
  ((ended < N)) || break
  sleep 0.2
done
end="$(date +%s.%N)"
python3 -c "
n, ok, s = $N, $ok, $end - $start
print(f'{n} tasks: {ok} succeeded, {n - ok} did not, in {s:.2f} s ({n / s:.1f} tasks/s, apply to the last one seen ended)')"

if [[ -z "${KEEP:-}" ]]; then
  for i in $(seq -f '%04g' 1 "$N"); do
    "$KRT" delete run "task-$i" --wait 0s >/dev/null
  done
fi
((ok == N))
