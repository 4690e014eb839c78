#!/usr/bin/env bash
# What docker/compose.yml's PostgreSQL settings buy (issue 35, bench/RESULTS.md section 8):
# the 8-metric, 50-run comparison of running runs on bench/scale.py's 200M-point lab, with
# shared_buffers 4 GB and pg_prewarm's autoprewarm, first after a plain restart, then
# after a restart with the OS page cache emptied (compare with
# `bench/compare_lab.py --runs 2000 --drop-caches`, the same from the disk without them).
#
#   sudo bash bench/prewarm_restart.sh [postgres://postgres@127.0.0.1:5432/mrl_bench_scale4x]
#
# Root on Linux, a local cluster that pg_ctlcluster manages (CLUSTER, default "15 main")
# and pg_prewarm (in PostgreSQL's contrib, as Debian and the postgres image ship it).
# Changes the cluster's settings with ALTER SYSTEM and resets them at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
DB=${1:-postgres://postgres@127.0.0.1:5432/mrl_bench_scale4x}
read -r -a CLUSTER <<< "${CLUSTER:-15 main}"
lab() {
  DATABASE_URL=$DB PYTHONPATH=. .venv/bin/python bench/compare_lab.py --runs 2000 --reps 20 \
    --http-first 2>&1 | grep -v "UserWarning\|mw_instance" | tail -10
}
reset() {
  psql "$DB" -qc "ALTER SYSTEM RESET shared_preload_libraries" -c "ALTER SYSTEM RESET shared_buffers"
  pg_ctlcluster "${CLUSTER[@]}" restart
}
trap reset EXIT
psql "$DB" -qc "ALTER SYSTEM SET shared_preload_libraries = 'pg_prewarm'" \
  -c "ALTER SYSTEM SET shared_buffers = '4GB'"
pg_ctlcluster "${CLUSTER[@]}" restart
psql "$DB" -qc "CREATE EXTENSION IF NOT EXISTS pg_prewarm"
echo "== shared_buffers $(psql "$DB" -Atc "SHOW shared_buffers"), after a restart"
lab
psql "$DB" -Atc "SELECT autoprewarm_dump_now() || ' buffers listed for autoprewarm'"
pg_ctlcluster "${CLUSTER[@]}" stop
sync
echo 3 > /proc/sys/vm/drop_caches
started=$(date +%s.%N)
pg_ctlcluster "${CLUSTER[@]}" start
sleep 1  # the leader starts the database's worker
until [[ $(psql "$DB" -Atc "SELECT count(*) FROM pg_stat_activity
                            WHERE backend_type = 'autoprewarm worker'") == 0 ]]; do
  sleep 0.2
done
echo "autoprewarm done $(echo "$(date +%s.%N) - $started" | bc) s after the start"
echo "== the same, after a restart with the OS page cache dropped"
lab
