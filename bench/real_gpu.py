"""The exporter on a real GPU node, beside nvidia-smi (docs/real-gpu.md).

Needs a host with an NVIDIA driver (its libnvidia-ml and nvidia-smi); `--load` also needs
PyTorch with CUDA. Two parts, each printing a markdown table:

  values   the exporter (`-c 1000`, default counters, no `-k`) idle, then under `--load`: GPU 0's
           DCGM readings from /metrics beside nvidia-smi's reading of the same quantities,
           taken right after the scrape; the pass's own duration (self-metric).
  process  with `--process-metrics --kubernetes-api false` while the load runs: the
           exporter's per-process series for the load's PID (memory, SM utilisation) beside
           nvidia-smi's --query-compute-apps. The load runs in no pod, so it is reported as
           such (pod="").

`--load` runs bf16 matrix products on GPU 0 in a child for the whole `process` part and the
loaded `values` reading. Footprint (RSS, threads, CPU) is bench/footprint.py --real-nvml.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from _common import PYTHON, Server, clean_env, exporter_argv, free_port, http_get

# DCGM field -> nvidia-smi's --query-gpu name for the same quantity, in the same unit.
FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization.gpu",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "utilization.memory",
    "DCGM_FI_DEV_FB_TOTAL": "memory.total",
    "DCGM_FI_DEV_FB_USED": "memory.used",
    "DCGM_FI_DEV_FB_RESERVED": "memory.reserved",
    "DCGM_FI_DEV_FB_FREE": "memory.free",
    "DCGM_FI_DEV_POWER_USAGE": "power.draw",
    "DCGM_FI_DEV_GPU_TEMP": "temperature.gpu",
    "DCGM_FI_DEV_MEMORY_TEMP": "temperature.memory",
    "DCGM_FI_DEV_SM_CLOCK": "clocks.sm",
    "DCGM_FI_DEV_MEM_CLOCK": "clocks.mem",
}
PROFILING = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
             "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
             "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("loaded", flush=True)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def gpu0(body: str, name: str) -> str:
    match = re.search(rf'^{name}\{{gpu="0"[^}}]*\}} (\S+)$', body, re.M)
    return match[1] if match else "absent"


def smi(query: str, what: str = "--query-gpu") -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", f"{what}={query}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line]


def self_metric(body: str, name: str) -> str:
    return "; ".join(f"{labels} {value}" for labels, value in
                     re.findall(rf"^{name}(\{{[^}}]*\}})? (\S+)$", body, re.M))


def values(server: Server, label: str) -> None:
    server.wait_status("/ready")
    time.sleep(3.0)  # a few passes, so rates and the GPM sample pair exist
    body = http_get(server.base + "/metrics")[2].decode()
    reading = smi(",".join(FIELDS.values()))[0]
    print(f"\n### {label}\n\n| field | /metrics | nvidia-smi |\n|---|---:|---:|")
    for (field, query), theirs in zip(FIELDS.items(), reading, strict=True):
        print(f"| {field} ({query}) | {gpu0(body, field)} | {theirs} |")
    for field in PROFILING:
        print(f"| {field} | {gpu0(body, field)} | |")
    print(f"\nlast pass: {self_metric(body, 'gpu_enricher_last_collection_duration_seconds')}")


def process_part(server: Server, load_pid: int) -> None:
    server.wait_status("/ready")
    time.sleep(4.0)
    body = http_get(server.base + "/metrics")[2].decode()
    print(f"\n### per-process series for the load (pid {load_pid})\n")
    lines = [line for line in body.splitlines()
             if line.startswith("gpu_enricher_") and f'pid="{load_pid}"' in line]
    print("\n".join(lines) or "NONE")
    print("\nnvidia-smi --query-compute-apps=pid,used_memory (MiB):",
          smi("pid,used_memory", "--query-compute-apps"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", action="store_true", help="also under a PyTorch bf16 load")
    args = parser.parse_args()
    env = clean_env()

    def exporter(*extra: str) -> Server:
        port = free_port()
        return Server("exporter", exporter_argv(port, 1000, extra), env, port)

    idle = exporter()
    idle.start()
    try:
        values(idle, "idle")
    finally:
        idle.stop()
    if not args.load:
        return 0
    load = subprocess.Popen([PYTHON, "-c", LOAD.format(seconds=60)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert load.stdout is not None and load.stdout.readline().startswith("loaded")
        time.sleep(2.0)
        for extra, part in (((), "values"),
                            (("--process-metrics", "--kubernetes-api", "false"), "process")):
            server = exporter(*extra)
            server.start()
            try:
                if part == "values":
                    values(server, "under a bf16 matmul load")
                else:
                    process_part(server, load.pid)
            finally:
                server.stop()
    finally:
        load.kill()
        load.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
