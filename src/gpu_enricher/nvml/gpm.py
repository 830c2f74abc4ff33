"""NVML GPU Performance Monitoring (Hopper and newer): DCGM's profiling fields without DCGM.

A GPM metric is a rate between two samples of the same GPU (or MIG GPU instance), so the
sampler keeps the previous sample of each and reports from the second pass on. Part of the
NVML backend: like `nvml/backend.py`, it runs only on the NVML thread.
"""

import contextlib
from collections.abc import Sequence
from typing import Any

import pynvml

SampleKey = tuple[str, int | None]  # (GPU UUID, GPU instance id or None for the whole GPU)


class _SamplePair:
    """Two NVML sample buffers used alternately: the previous one and the one to fill."""

    def __init__(self) -> None:
        self.buffers = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        self.current = 0
        self.has_previous = False

    def free(self) -> None:
        for buffer in self.buffers:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(buffer)


def device_supports_gpm(handle: Any) -> bool:
    try:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except pynvml.NVMLError:
        return False


class GpmSampler:
    def __init__(self) -> None:
        self._pairs: dict[SampleKey, _SamplePair] = {}
        self._touched: set[SampleKey] = set()

    def metrics(self, handle: Any, key: SampleKey,
                metric_ids: Sequence[int]) -> dict[int, float]:
        """Take a sample and return the metrics since the previous one ({} on the first).

        `handle` is the physical GPU; for a GPU instance `key[1]` is its id. Raises
        pynvml.NVMLError; the caller decides what the error means.
        """
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._pairs[key] = _SamplePair()
        self._touched.add(key)
        fresh = pair.buffers[pair.current]
        gpu_instance = key[1]
        if gpu_instance is None:
            pynvml.nvmlGpmSampleGet(handle, fresh)
        else:
            pynvml.nvmlGpmMigSampleGet(handle, gpu_instance, fresh)
        result: dict[int, float] = {}
        if pair.has_previous:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(metric_ids)
            request.sample1 = pair.buffers[1 - pair.current]
            request.sample2 = fresh
            for slot, metric_id in enumerate(metric_ids):
                request.metrics[slot].metricId = metric_id
            pynvml.nvmlGpmMetricsGet(request)
            for slot, metric_id in enumerate(metric_ids):
                metric = request.metrics[slot]
                if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                    result[metric_id] = float(metric.value)
        pair.current = 1 - pair.current
        pair.has_previous = True
        return result

    def prune(self) -> None:
        """Free the samples of GPUs and instances that this pass did not see (MIG changes)."""
        for key in set(self._pairs) - self._touched:
            self._pairs.pop(key).free()
        self._touched.clear()

    def close(self) -> None:
        for pair in self._pairs.values():
            pair.free()
        self._pairs.clear()
        self._touched.clear()
