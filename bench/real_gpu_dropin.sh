#!/usr/bin/env bash
# Issue 24's checks on a real GPU (the device machine), in one run; each part writes its file to
# OUTDIR as it ends:
#   device_count.md   bench/device_count.py: what following GPU binds and unbinds costs
#   watch_groups.md   bench/watch_groups.py --real-nvml: NVML CPU per pass with and without a
#                     watch group
#   dropin.txt        the exporter as dcgm-exporter's chart 4.8.3 and the GPU Operator start it
#                     (no -f, DCGM_EXPORTER_* env, /etc/dcgm-exporter mapped), then with
#                     -d g -rbmn -o and --dump-enabled, against nvidia-smi's names and UUIDs
#   bench/real_gpu_dropin.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}
mkdir -p "$out"
source bench/_device_env.sh
{ date -u; nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader
  git log -1 --format=%h 2>/dev/null; } >"$out/env.txt" 2>&1
cat "$out/env.txt"
timeout 120 python3 bench/device_count.py --rounds 3 2>&1 | tee "$out/device_count.md"
timeout 200 python3 bench/watch_groups.py --real-nvml --runs 3 2>&1 | tee "$out/watch_groups.md"

scrape() {  # ARGS... : start the exporter with the env set by the caller, print /metrics
    python3 -m gpu_enricher "$@" >/tmp/exporter.log 2>&1 &  # the caller greps its log
    local pid=$!
    for _ in $(seq 1 100); do
        curl -sf http://127.0.0.1:9400/ready >/dev/null 2>&1 && break
        sleep 0.1
    done
    sleep 2.5
    curl -s http://127.0.0.1:9400/metrics
    kill -TERM $pid 2>/dev/null || tail -5 /tmp/exporter.log  # it ended early: say why
    wait $pid
}
{
    image=$(mktemp -d)
    cp "${DROPIN_COUNTERS:-src/gpu_enricher/fields/default-counters.csv}" "$image/default-counters.csv"
    echo "## chart 4.8.3 (no -f; its list at /etc/dcgm-exporter/default-counters.csv)"
    env GPU_ENRICHER_DCGM_EXPORTER_DIR="$image" DCGM_EXPORTER_LISTEN=:9400 NODE_NAME=gpu-node \
        DCGM_EXPORTER_WEB_READ_TIMEOUT=10s DCGM_EXPORTER_WEB_WRITE_TIMEOUT=30s \
        DCGM_EXPORTER_INTERVAL=1000 bash -c "$(declare -f scrape); scrape" \
        | grep -E '^DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE|FB_USED)\{' | head -6
    grep -E "counters:|WARNING|ERROR" /tmp/exporter.log | head -8
    echo "## the GPU Operator's standalone DCGM env (DCGM_REMOTE_HOSTENGINE_INFO)"
    env DCGM_EXPORTER_LISTEN=:9400 NODE_NAME=gpu-node DCGM_EXPORTER_INTERVAL=1000 \
        DCGM_EXPORTER_COLLECTORS=/etc/dcgm-exporter/dcp-metrics-included.csv \
        DCGM_REMOTE_HOSTENGINE_INFO=nvidia-dcgm:5555 bash -c "$(declare -f scrape); scrape" \
        | grep -cE '^DCGM_FI_' | sed 's/^/DCGM_FI_ series: /'
    grep -E "HOSTENGINE|ERROR" /tmp/exporter.log | head -4
    echo "## -d g -rbmn -o --dump-enabled"
    dump=$(mktemp -d)
    env DCGM_EXPORTER_LISTEN=:9400 NODE_NAME=gpu-node DCGM_EXPORTER_INTERVAL=1000 \
        bash -c "$(declare -f scrape); scrape -d g -rbmn -o --dump-enabled --dump-directory $dump" \
        | grep -E '^DCGM_FI_DEV_GPU_TEMP\{' | head -4
    ls -la "$dump" | head -8
    echo "## nvidia-smi"
    nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader
} 2>&1 | tee "$out/dropin.txt"
