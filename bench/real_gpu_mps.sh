#!/usr/bin/env bash
# Issue 25's MPS check on a real GPU (the device machine), ≤ 3 minutes, every step under a
# timeout; each file is written to OUTDIR as its step ends:
#   env.txt          date, GPUs, driver, commit, whether nvidia-cuda-mps-control is on PATH
#   mps.txt          the MPS control daemon's start (or why it was skipped) and its quit
#   worker-N.txt     the two CUDA processes (bench/mps_worker.py): `ready PID`, `done PID N`
#   nvidia-smi.txt   nvidia-smi while they run (its process table marks MPS clients M+C)
#   compute-apps.csv nvidia-smi --query-compute-apps while they run
#   pynvml.json      bench/mps_probe.py: compute, graphics, MPS v3/v2 lists, per-PID
#                    utilisation samples, names, the MPS read's CPU
#   metrics.txt      the exporter's /metrics (--process-metrics -c 1000, no kubelet)
#   gpus.json        its /api/v1/gpus;  inspect.txt  gpu-enricher inspect
#   exporter.log     its log;  after.txt  what is left once everything stopped
# Without nvidia-cuda-mps-control the two processes run without MPS (plain compute
# processes), which still shows what NVML's MPS list answers on this node.
#   bench/real_gpu_mps.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
source bench/_device_env.sh
port=${MPS_CHECK_PORT:-9400}
seconds=${MPS_WORKER_SECONDS:-20}
work=$(mktemp -d /tmp/gpe-mps.XXXXXX)
workers=()
exporter=""
daemon=0

cleanup() {  # leave the GPU as it was: our processes stopped by PID, the daemon told to quit
    for pid in "${workers[@]}" $exporter; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${workers[@]}" $exporter; do
        timeout 15 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    done
    if [ "$daemon" = 1 ]; then
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/pipe timeout 15 nvidia-cuda-mps-control \
            >>"$out/mps.txt" 2>&1
        echo "quit sent: rc $?" >>"$out/mps.txt"
        for _ in $(seq 1 50); do  # the server and the daemon take a moment to exit
            pgrep -x nvidia-cuda-mps >/dev/null 2>&1 || break
            sleep 0.2
        done
        daemon=0
    fi
    { date -u; echo "## MPS processes left (none expected):"
      pgrep -a -x nvidia-cuda-mps || echo none
      echo "## nvidia-smi"; timeout 20 nvidia-smi; } >"$out/after.txt" 2>&1
    cp -r "$work/log" "$out/mps-log" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{ date -u
  timeout 20 nvidia-smi --query-gpu=index,uuid,name,driver_version,compute_mode \
      --format=csv,noheader
  git log -1 --format=%h 2>/dev/null
  command -v nvidia-cuda-mps-control || echo "nvidia-cuda-mps-control: not on PATH"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

# The exporter first: it is ready by the time the workers are.
timeout 150 python3 -m gpu_enricher --process-metrics -c 1000 -a "127.0.0.1:$port" \
    >"$out/exporter.log" 2>&1 &
exporter=$!

mkdir -p "$work/pipe" "$work/log"
if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
    if timeout 15 nvidia-cuda-mps-control -d >"$out/mps.txt" 2>&1; then
        daemon=1
        echo "MPS control daemon started (pipe $work/pipe)" | tee -a "$out/mps.txt"
    else
        echo "nvidia-cuda-mps-control -d failed (rc $?): running without MPS" \
            | tee -a "$out/mps.txt"
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
else
    echo "nvidia-cuda-mps-control is not on PATH: MPS part skipped, the two processes run" \
         "without MPS" | tee "$out/mps.txt"
fi

# Two clients of different sizes and memory, so that their figures tell them apart.
for n in 1 2; do
    size=$((n == 1 ? 8192 : 4096))
    timeout $((seconds + 40)) python3 bench/mps_worker.py "$seconds" "$size" "$n" \
        >"$out/worker-$n.txt" 2>&1 &
    workers+=($!)
done
for _ in $(seq 1 300); do  # CUDA start-up under MPS: up to 30 s
    [ "$(cat "$out"/worker-*.txt 2>/dev/null | grep -c '^ready')" -ge 2 ] && break
    sleep 0.1
done
grep -h "^ready\|Error\|error" "$out"/worker-*.txt
sleep 3  # a few exporter passes and utilisation samples with both running

timeout 20 nvidia-smi >"$out/nvidia-smi.txt" 2>&1
timeout 20 nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid \
    --format=csv >"$out/compute-apps.csv" 2>&1
timeout 30 python3 bench/mps_probe.py >"$out/pynvml.json" 2>&1
for _ in $(seq 1 50); do
    timeout 2 curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
    sleep 0.2
done
timeout 10 curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics.txt" 2>&1
timeout 10 curl -s "http://127.0.0.1:$port/api/v1/gpus" >"$out/gpus.json" 2>&1
timeout 20 python3 -m gpu_enricher inspect --url "http://127.0.0.1:$port" \
    >"$out/inspect.txt" 2>&1
echo "## nvidia-smi processes"; sed -n '/Processes:/,$p' "$out/nvidia-smi.txt"
echo "## exporter"; grep -E '^gpu_enricher_(process|pod)_' "$out/metrics.txt" | head -12
cat "$out/inspect.txt"

for pid in "${workers[@]}"; do  # they end on their own after $seconds
    timeout $((seconds + 30)) tail --pid="$pid" -f /dev/null 2>/dev/null
done
cat "$out"/worker-*.txt | grep -h "^done" || true
