"""What NVML says about the GPU processes, for bench/real_gpu_mps.sh: per GPU the compute,
graphics and MPS (v3, v2) lists, two rounds of nvmlDeviceGetProcessUtilization one second
apart (every sample, per PID), each PID's name (nvmlSystemGetProcessName), and the CPU one MPS
list read costs (thread time, median of 200). JSON on stdout.

    python3 bench/mps_probe.py
"""

import contextlib
import json
import statistics
import time
from typing import Any

import pynvml


def listed(function: Any, handle: Any) -> Any:
    try:
        return [{"pid": int(p.pid), "used_bytes": p.usedGpuMemory,
                 "gpu_instance_id": int(p.gpuInstanceId),
                 "compute_instance_id": int(p.computeInstanceId)} for p in function(handle)]
    except pynvml.NVMLError as exc:
        return f"error: {type(exc).__name__} ({exc.value})"


def samples(handle: Any, since: int) -> tuple[Any, int]:
    try:
        found = pynvml.nvmlDeviceGetProcessUtilization(handle, since)
    except pynvml.NVMLError as exc:
        return f"error: {type(exc).__name__} ({exc.value})", since
    rows = [{"pid": int(s.pid), "sm": int(s.smUtil), "mem": int(s.memUtil),
             "enc": int(s.encUtil), "dec": int(s.decUtil), "ts": int(s.timeStamp)}
            for s in found]
    return rows, max([since, *(r["ts"] for r in rows)])


def cost_us(handle: Any) -> float:
    spent = []
    for _ in range(200):
        start = time.thread_time_ns()
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(handle)
        spent.append(time.thread_time_ns() - start)
    return statistics.median(spent) / 1000


def name(pid: int) -> str:
    try:
        raw = pynvml.nvmlSystemGetProcessName(pid)
    except pynvml.NVMLError as exc:
        return f"error: {type(exc).__name__}"
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def main() -> None:
    pynvml.nvmlInit()
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        gpu: dict[str, Any] = {
            "index": index,
            "compute": listed(pynvml.nvmlDeviceGetComputeRunningProcesses, handle),
            "graphics": listed(pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle),
            "mps_v3": listed(pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3, handle),
            "mps_v2": listed(pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v2, handle),
        }
        first, seen = samples(handle, 0)
        time.sleep(1.0)
        second, _ = samples(handle, seen)
        gpu["utilization_since_0"] = first
        gpu["utilization_next_second"] = second
        pids = {p["pid"] for key in ("compute", "mps_v3") if isinstance(gpu[key], list)
                for p in gpu[key]}
        gpu["names"] = {pid: name(pid) for pid in sorted(pids)}
        gpu["mps_v3_read_cpu_us_median"] = cost_us(handle)
        gpus.append(gpu)
    driver = pynvml.nvmlSystemGetDriverVersion()
    pynvml.nvmlShutdown()
    print(json.dumps({"driver": driver, "gpus": gpus}, indent=1, default=str))


if __name__ == "__main__":
    main()
