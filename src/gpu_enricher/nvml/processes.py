"""The processes on one GPU: NVML's running lists, MIG attribution, per-process utilisation.

Part of the NVML backend (with `nvml/backend.py`, `nvml/device.py` and `nvml/gpm.py`, the only
importers of pynvml); runs only on the NVML thread.
"""

import ctypes
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final

import pynvml

from ..model import ProcessSample
from .device import DeviceReader

NO_INSTANCE: Final = 0xFFFFFFFF  # gpuInstanceId outside MIG mode, or hidden from the caller
NOT_AVAILABLE_ULL: Final = 0xFFFFFFFFFFFFFFFF  # usedGpuMemory unknown
NOT_AVAILABLE_UINT: Final = 0xFFFFFFFF
# No sample newer than lastSeenTimeStamp: the driver says NOT_FOUND. pynvml raises
# NVMLError(SUCCESS) if a driver answers its size query with SUCCESS instead.
NO_SAMPLES: Final = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS})
SAMPLE_VALID_SECONDS: Final = 15.0
"""How long a process's last utilisation sample stands in for newer ones, by its NVML
timestamp (CPU wall clock, µs). The driver records a sample only for a process that was busy
in its sampling period, so at short intervals a pass often finds none for a running process:
without this its ratio would vanish for that pass and a shared GPU's split read 0."""

ProcessMap = dict[int, ProcessSample]
"""pid → sample, in the order NVML listed them."""
InstanceProcesses = dict[int, ProcessMap]
"""GPU instance id → the processes its MIG device handle lists."""


def process_list(symbol: str, entry: Any, handle: Any) -> Sequence[Any]:
    """One of NVML's running-process lists, as pynvml's own wrappers ask for it (a size query,
    then an array oversized for processes that start in between), but its entries left as
    ctypes structures: pynvml copies each into a dict-backed object, ~5 µs an entry, which
    made a GPU's 12 MPS clients, listed twice (`M+C`), cost 81 µs a pass (issue 25's
    benchmark). Raises pynvml.NVMLError as the wrappers do (FUNCTION_NOT_FOUND: no symbol)."""
    function = pynvml._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(0)
    status = function(handle, ctypes.byref(count), None)
    if status == pynvml.NVML_SUCCESS:
        return ()
    if status != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(status)
    count.value = count.value * 2 + 5
    entries = (entry * count.value)()
    status = function(handle, ctypes.byref(count), entries)
    if status != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(status)
    return list(entries[:count.value])


def mps_clients(handle: Any) -> Sequence[Any]:
    """The MPS client processes (issue 25): v3, else v2 where the driver has no v3 symbol.
    NOT_SUPPORTED, or no symbol at all, is remembered per device by the reader, so an MPS-less
    GPU is asked once."""
    try:
        return process_list("nvmlDeviceGetMPSComputeRunningProcesses_v3",
                            pynvml.c_nvmlProcessInfo_v3_t, handle)
    except pynvml.NVMLError as exc:
        if exc.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
    return process_list("nvmlDeviceGetMPSComputeRunningProcesses_v2",
                        pynvml.c_nvmlProcessInfo_v2_t, handle)


_LISTS: Final[tuple[tuple[str, str, Callable[[Any], Any]], ...]] = (
    # (kind, unsupported key, reading). MPS first: a client the compute list shows too
    # (nvidia-smi's `M+C`) is reported once, as mps; then compute: a process in the compute
    # and graphics lists is reported once, as compute. The MPS server is in the compute list;
    # attribution/workloads.py tells it by its name.
    ("mps", "mps_processes", mps_clients),
    ("compute", "processes", partial(process_list, "nvmlDeviceGetComputeRunningProcesses_v3",
                                     pynvml.c_nvmlProcessInfo_v3_t)),
    ("graphics", "graphics_processes", partial(
        process_list, "nvmlDeviceGetGraphicsRunningProcesses_v3", pynvml.c_nvmlProcessInfo_v3_t)),
)


def running_processes(reader: DeviceReader, handle: Any) -> ProcessMap:
    """MPS client, compute and graphics processes of one device handle (a GPU or a MIG
    device)."""
    found: ProcessMap = {}
    for kind, key, function in _LISTS:
        for p in reader.call(key, partial(function, handle)) or ():
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


@dataclass(frozen=True, slots=True)
class Utilization:
    """One process's newest utilisation sample, as ratios."""

    sm: float | None
    memory: float | None
    timestamp_us: int


class ProcessReader:
    """Reads a GPU's processes each pass; remembers per GPU the newest utilisation sample
    seen, so that each pass asks NVML only for what is new since the previous one, and each
    process's own newest sample, carried into passes without a newer one while it is recent
    (`SAMPLE_VALID_SECONDS`)."""

    def __init__(self) -> None:
        self.last_seen: dict[str, int] = {}  # GPU UUID → newest sample timestamp (µs)
        # GPU UUID → pid → its newest sample; only the PIDs of that GPU's latest pass.
        self.latest: dict[str, dict[int, Utilization]] = {}

    def clear(self) -> None:
        self.last_seen.clear()
        self.latest.clear()

    def read(self, reader: DeviceReader, handle: Any, uuid: str,
             by_instance: Mapping[int, ProcessMap]) -> tuple[ProcessSample, ...]:
        processes = running_processes(reader, handle)
        attribute(processes, by_instance)
        if not processes:
            self.latest.pop(uuid, None)
            return ()
        fresh = self._utilization(reader, handle, uuid)
        if fresh is None:  # failed (counted) or unsupported: no values this pass
            before = self.latest.get(uuid, {})
            self.latest[uuid] = {pid: u for pid, u in before.items() if pid in processes}
            return tuple(processes.values())
        util = self._carry(uuid, processes, fresh)
        return tuple(
            replace(p, sm_utilization=u.sm, memory_utilization=u.memory)
            if (u := util.get(pid)) is not None else p
            for pid, p in processes.items()
        )

    def _carry(self, uuid: str, processes: ProcessMap,
               fresh: Mapping[int, Any]) -> dict[int, Utilization]:
        """Each running process's sample: this pass's, else its last one while recent."""
        now_us = time.time() * 1e6
        valid_us = SAMPLE_VALID_SECONDS * 1e6
        before = self.latest.get(uuid, {})
        util: dict[int, Utilization] = {}
        for pid in processes:
            sample = fresh.get(pid)
            if sample is not None:
                util[pid] = Utilization(ratio(int(sample.smUtil)), ratio(int(sample.memUtil)),
                                        int(sample.timeStamp))
            elif (old := before.get(pid)) is not None \
                    and abs(now_us - old.timestamp_us) <= valid_us:
                # abs: a sample "from the future" means the clock stepped (or a driver stamps
                # on another clock): its age is unknown, so it is not trusted.
                util[pid] = old
        self.latest[uuid] = util  # PIDs that left the GPU, and stale samples, are forgotten
        return util

    def _utilization(self, reader: DeviceReader, handle: Any,
                     uuid: str) -> dict[int, Any] | None:
        """pid → its newest sample since the last pass; None when the call failed."""
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

        samples = reader.call("process_utilization", query)
        if samples is None:
            return None
        if samples:
            self.last_seen[uuid] = max(last_seen, max(int(s.timeStamp) for s in samples))
        return newest_per_pid(samples)


def _memory(used: Any) -> int | None:
    # NVML_VALUE_NOT_AVAILABLE: the memory is not known (WDDM, or a process being torn down).
    return None if used is None or int(used) == NOT_AVAILABLE_ULL else int(used)


def _instance(gi: Any) -> int | None:
    return None if gi is None or int(gi) == NO_INSTANCE else int(gi)
