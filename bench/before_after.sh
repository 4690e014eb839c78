#!/usr/bin/env bash
# Run benchmarks on an earlier commit and on this working tree, alternately, with the same
# .venv and zoo, so a refactoring can show it made nothing slower.
#
#   bash bench/before_after.sh REV [BENCH...]     # default: trainer_step ingest compare
#
# REV is checked out as a git worktree in var/bench/before-<REV>; each benchmark's output
# goes to var/bench/<bench>-{before,after}.txt and its tail to the terminal. The database
# benchmarks drop and recreate mrl_bench_before / mrl_bench_after.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/before_after.sh REV [BENCH...]}
shift
benches=("${@:-trainer_step ingest compare}")
read -r -a benches <<<"${benches[*]}"
root=$PWD
before=$root/var/bench/before-$(git rev-parse --short "$rev")
mkdir -p "$root/var/bench"
[[ -d $before ]] || git worktree add --detach "$before" "$rev" >/dev/null
export MRL_ZOO_DIR=${MRL_ZOO_DIR:-$root/var/test/zoo}
for bench in "${benches[@]}"; do
  for side in before after; do
    tree=$before
    [[ $side == after ]] && tree=$root
    out=$root/var/bench/$bench-$side.txt
    echo "=== $bench, $side ($(date +%T))"
    (cd "$tree" && PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_$side \
      "$root/.venv/bin/python" "bench/$bench.py") >"$out" 2>&1
    tail -n 25 "$out"
  done
done
