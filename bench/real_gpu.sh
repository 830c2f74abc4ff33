#!/usr/bin/env bash
# The real-GPU checks of docs/real-gpu.md, in one run on a GPU node (the device machine):
# footprint with and without -k, values against nvidia-smi (idle and under a bf16 load), the
# per-process series of a real CUDA process, and the 50 MB kubelet List on a server's CPUs.
# Each part writes its table to OUTDIR as it ends, so a run cut short keeps what it finished.
#   bench/real_gpu.sh OUTDIR
# Wheels in .whl/ are installed into /tmp/site first (a node without a registry); a wrk
# wrapper in .devtools/bin and a prebuilt fake NVML in .devtools/fake-nvml are used if there.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}
mkdir -p "$out"
source bench/_device_env.sh
[ -d .devtools/bin ] && export PATH=$PWD/.devtools/bin:$PATH
[ -d .devtools/fake-nvml ] && export BENCH_BUILD_DIR=$PWD/.devtools
{
    date -u; uname -r; nproc; nvidia-smi
    python3 -c 'import sys, aiohttp, grpc, google.protobuf as pb, pynvml, uvloop, hpack
print(sys.version.split()[0], "aiohttp", aiohttp.__version__, "grpcio", grpc.__version__,
      "protobuf", pb.__version__, "uvloop", uvloop.__version__, "hpack", hpack.__version__)'
    python3 -m pip show nvidia-ml-py 2>/dev/null | grep -i ^version
    git log -1 --format=%h 2>/dev/null
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
python3 bench/footprint.py --real-nvml --modes nvml,kubelet --starts 3 --scrape-seconds 30 \
    --idle-seconds 30 --baselines 2>&1 | tee "$out/footprint.md"
python3 bench/real_gpu.py --load 2>&1 | tee "$out/values.md"
python3 bench/kubelet.py --sections large --large-rounds "${LARGE_ROUNDS:-4}" --duration 8 \
    --large-lists 5 --server-cpus 1 --side-cpus 2,3,4,5,6,7 2>&1 | tee "$out/large.md"
