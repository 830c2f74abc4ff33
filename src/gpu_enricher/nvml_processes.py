"""The processes on one GPU: NVML's running lists, MIG attribution, per-process utilisation.

Part of the NVML backend (with `nvml.py`, `nvml_device.py` and `nvml_gpm.py`, the only
importers of pynvml); runs only on the NVML thread.
"""

from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Final

import pynvml

from .model import ProcessSample
from .nvml_device import DeviceReader

NO_INSTANCE: Final = 0xFFFFFFFF  # gpuInstanceId outside MIG mode, or hidden from the caller
NOT_AVAILABLE_ULL: Final = 0xFFFFFFFFFFFFFFFF  # usedGpuMemory unknown
NOT_AVAILABLE_UINT: Final = 0xFFFFFFFF
# No sample newer than lastSeenTimeStamp: the driver says NOT_FOUND. pynvml raises
# NVMLError(SUCCESS) if a driver answers its size query with SUCCESS instead.
NO_SAMPLES: Final = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS})

ProcessMap = dict[int, ProcessSample]
"""pid → sample, in the order NVML listed them."""
InstanceProcesses = dict[int, ProcessMap]
"""GPU instance id → the processes its MIG device handle lists."""

_LISTS: Final = (
    # (kind, unsupported key, pynvml function). Compute first: a process in both lists is
    # reported once, as compute.
    ("compute", "processes", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses"),
)


def running_processes(reader: DeviceReader, handle: Any) -> ProcessMap:
    """Compute and graphics processes of one device handle (a GPU or a MIG device)."""
    found: ProcessMap = {}
    for kind, key, function in _LISTS:
        for p in reader.call(key, partial(getattr(pynvml, function), handle)) or ():
            pid = int(p.pid)
            if pid not in found:
                found[pid] = ProcessSample(
                    pid=pid,
                    used_memory_bytes=_memory(p.usedGpuMemory),
                    gpu_instance_id=_instance(p.gpuInstanceId),
                    kind=kind,
                )
    return found


def attribute(processes: ProcessMap, by_instance: Mapping[int, ProcessMap]) -> None:
    """Give processes without a GPU instance the one whose MIG handle lists them.

    The parent handle names the instance only for a privileged caller; a process that only
    a MIG handle lists (the parent's list refused or raced) is added.
    """
    for gi, members in by_instance.items():
        for pid, sample in members.items():
            known = processes.get(pid)
            if known is None:
                processes[pid] = replace(sample, gpu_instance_id=gi)
            elif known.gpu_instance_id is None:
                processes[pid] = replace(known, gpu_instance_id=gi)


def newest_per_pid(samples: Any) -> dict[int, Any]:
    """The driver keeps a short history: one pid can have several samples; keep the newest."""
    newest: dict[int, Any] = {}
    for s in samples:
        pid = int(s.pid)
        if pid not in newest or int(s.timeStamp) > int(newest[pid].timeStamp):
            newest[pid] = s
    return newest


def ratio(percent: int) -> float | None:
    """NVML's percent as a ratio 0..1 (clamped); its 'not available' value is None."""
    if percent == NOT_AVAILABLE_UINT:
        return None
    return min(max(percent / 100.0, 0.0), 1.0)


class ProcessReader:
    """Reads a GPU's processes each pass; remembers per GPU the newest utilisation sample
    seen, so that each pass asks NVML only for what is new since the previous one."""

    def __init__(self) -> None:
        self.last_seen: dict[str, int] = {}  # GPU UUID → newest sample timestamp (µs)

    def clear(self) -> None:
        self.last_seen.clear()

    def read(self, reader: DeviceReader, handle: Any, uuid: str,
             by_instance: Mapping[int, ProcessMap]) -> tuple[ProcessSample, ...]:
        processes = running_processes(reader, handle)
        attribute(processes, by_instance)
        if not processes:
            return ()
        util = self._utilization(reader, handle, uuid)
        return tuple(
            replace(p, sm_utilization=ratio(int(s.smUtil)),
                    memory_utilization=ratio(int(s.memUtil)))
            if (s := util.get(pid)) is not None else p
            for pid, p in processes.items()
        )

    def _utilization(self, reader: DeviceReader, handle: Any, uuid: str) -> dict[int, Any]:
        last_seen = self.last_seen.get(uuid, 0)

        def query() -> Any:
            for attempt in (1, 2):
                try:
                    return pynvml.nvmlDeviceGetProcessUtilization(handle, last_seen)
                except pynvml.NVMLError as exc:
                    if exc.value in NO_SAMPLES:
                        return []
                    # pynvml does not oversize its buffer: a sample that arrived between
                    # its size query and the read makes the read too small. Ask again once.
                    if exc.value != pynvml.NVML_ERROR_INSUFFICIENT_SIZE or attempt == 2:
                        raise
            return []  # not reached: the second attempt returns or raises

        samples = reader.call("process_utilization", query) or []
        if samples:
            self.last_seen[uuid] = max(last_seen, max(int(s.timeStamp) for s in samples))
        return newest_per_pid(samples)


def _memory(used: Any) -> int | None:
    # pynvml already turns NVML_VALUE_NOT_AVAILABLE into None; older versions did not.
    return None if used is None or int(used) == NOT_AVAILABLE_ULL else int(used)


def _instance(gi: Any) -> int | None:
    return None if gi is None or int(gi) == NO_INSTANCE else int(gi)
