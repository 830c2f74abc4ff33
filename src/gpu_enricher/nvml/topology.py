"""DCGM_EXP_P2P_STATUS's reading: NVLink peer-to-peer status between every pair of GPUs.

dcgm-exporter 4.x (internal/pkg/collector/p2p_status_collector.go) asks DCGM for the NVLink P2P
status matrix, which DCGM fills from `nvmlDeviceGetP2PStatus(i, j, NVML_P2P_CAPS_INDEX_NVLINK)`.
The status changes only with the hardware or its driver settings, so it is read on the slow
cadence (and at once for a GPU that appeared or came back); n GPUs cost n·(n-1) calls of a few
microseconds. Part of the NVML backend; runs only on the NVML thread.
"""

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import pynvml

from ..model import GpuSnapshot, SampleError
from .device import GPU_FATAL, SOURCE, UNSUPPORTED, error_reason


class P2pReader:
    """The last status matrix, by (GPU UUID, peer UUID), refreshed every `interval_seconds`
    and whenever the set of GPUs changes."""

    def __init__(self, interval_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._read_at: float | None = None
        self._gpus: tuple[str, ...] = ()
        self._status: dict[int, dict[int, int]] = {}

    def clear(self) -> None:
        self._read_at = None

    def read(self, handles: Mapping[int, tuple[str, Any]],
             errors: list[SampleError]) -> Mapping[int, Mapping[int, int]]:
        """GPU index → peer index → status, for the answering GPUs (`handles`: index →
        (UUID, handle)). A pair whose call fails is left out (the failure is counted unless it
        is NOT_SUPPORTED)."""
        gpus = tuple(uuid for _, (uuid, _) in sorted(handles.items()))
        now = self._clock()
        if (self._read_at is not None and gpus == self._gpus
                and now - self._read_at < self.interval_seconds):
            return self._status
        status: dict[int, dict[int, int]] = {}
        for i, (_, first) in handles.items():
            row = status[i] = {}
            for j, (_, second) in handles.items():
                if i == j:
                    continue
                try:
                    row[j] = int(pynvml.nvmlDeviceGetP2PStatus(
                        first, second, pynvml.NVML_P2P_CAPS_INDEX_NVLINK))
                except pynvml.NVMLError as exc:
                    if exc.value not in UNSUPPORTED and exc.value not in GPU_FATAL:
                        errors.append(SampleError(SOURCE, error_reason(exc), i))
        self._read_at, self._gpus, self._status = now, gpus, status
        return status

    def add_to(self, gpus: tuple[GpuSnapshot, ...],
               errors: list[SampleError]) -> tuple[GpuSnapshot, ...]:
        """The pass's GPUs, each answering one with its row of the matrix."""
        handles: dict[int, tuple[str, Any]] = {}
        for gpu in gpus:
            if gpu.healthy:
                with contextlib.suppress(pynvml.NVMLError):  # lost since: seen next pass
                    handles[gpu.identity.index] = (
                        gpu.identity.uuid, pynvml.nvmlDeviceGetHandleByIndex(gpu.identity.index))
        matrix = self.read(handles, errors)
        return tuple(dataclasses.replace(g, p2p_nvlink=matrix[g.identity.index])
                     if g.identity.index in matrix else g for g in gpus)
