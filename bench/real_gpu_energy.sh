#!/usr/bin/env bash
# Issue 25's energy check on a real GPU (the device machine), ≤ 2 minutes: the exporter with
# --process-metrics (no kubelet: energy goes to host/unknown/idle) and the energy counter read
# every pass, one CUDA process (bench/mps_worker.py) for 30 s; /metrics scraped twice, 12 s
# apart; per GPU, the energy series' rise against DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's rise
# in the same scrapes (bench/energy_sums.py), written to OUTDIR/sums.txt.
#   bench/real_gpu_energy.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}
mkdir -p "$out"
source bench/_device_env.sh
port=9401
python3 -m gpu_enricher -a "127.0.0.1:$port" --process-metrics -c 1000 \
    --slow-fields-interval 0 >"$out/exporter.log" 2>&1 &
exporter=$!
timeout 60 python3 bench/mps_worker.py 30 8192 1 >"$out/worker.txt" 2>&1 &
worker=$!
trap 'kill "$exporter" "$worker" 2>/dev/null; wait' EXIT
sleep 8
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics-1.txt"
sleep 12
curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics-2.txt"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
python3 bench/energy_sums.py "$out/metrics-1.txt" "$out/metrics-2.txt" | tee "$out/sums.txt"
