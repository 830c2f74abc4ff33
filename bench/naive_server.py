"""A naive exporter, for comparison: what a straightforward prometheus_client exporter does.

The same 18 DCGM metric names and label sets as gpu-enricher with the default counters
(gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION). Device handles
and identity labels are read once at start (the generous choice); every scrape then reads
every value from pynvml in the request handler, sets the Gauges, runs `generate_latest()`
and, when the client accepts gzip, `gzip.compress()` as prometheus_client's own handler does.
Counters are Gauges too: prometheus_client would append `_total` to Counter names.
"""

from __future__ import annotations

import argparse
import gzip
import os
import socket
from collections.abc import Callable
from typing import Any

import pynvml
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MIB = 1 << 20
LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
          "DCGM_FI_DRIVER_VERSION")
# Field-value ids read with one nvmlDeviceGetFieldValues call per GPU.
FI_MEMORY_TEMP, FI_REMAP_COR, FI_REMAP_UNC, FI_REMAP_FAILURE = 82, 142, 143, 145
FIELD_IDS = (FI_MEMORY_TEMP, FI_REMAP_COR, FI_REMAP_UNC, FI_REMAP_FAILURE)

METRICS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB)."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
     "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed"),
)

_READERS: dict[int, Callable[[Any], float]] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: lambda v: float(v.dVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda v: float(v.uiVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda v: float(v.ulVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda v: float(v.ullVal),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda v: float(v.sllVal),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: lambda v: float(v.siVal),
}


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class NaiveExporter:
    def __init__(self) -> None:
        pynvml.nvmlInit()
        self.registry = CollectorRegistry()
        self.gauges = {name: Gauge(name, help_text, LABELS, registry=self.registry)
                       for name, help_text in METRICS}
        hostname = os.environ.get("NODE_NAME") or socket.gethostname()
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        self.devices: list[tuple[Any, tuple[str, ...]]] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            labels = (str(i), _text(pynvml.nvmlDeviceGetUUID(handle)),
                      _text(pynvml.nvmlDeviceGetPciInfo(handle).busId), f"nvidia{i}",
                      _text(pynvml.nvmlDeviceGetName(handle)), hostname, driver)
            self.devices.append((handle, labels))

    def update(self) -> None:
        """Read every value of every GPU from NVML and set the Gauges."""
        g = self.gauges
        for handle, labels in self.devices:
            fields: dict[int, float] = {}
            for entry in pynvml.nvmlDeviceGetFieldValues(handle, list(FIELD_IDS)):
                reader = _READERS.get(entry.valueType)
                if entry.nvmlReturn == pynvml.NVML_SUCCESS and reader is not None:
                    fields[int(entry.fieldId)] = reader(entry.value)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            values = {
                "DCGM_FI_DEV_SM_CLOCK": pynvml.nvmlDeviceGetClockInfo(
                    handle, pynvml.NVML_CLOCK_SM),
                "DCGM_FI_DEV_MEM_CLOCK": pynvml.nvmlDeviceGetClockInfo(
                    handle, pynvml.NVML_CLOCK_MEM),
                "DCGM_FI_DEV_MEMORY_TEMP": fields.get(FI_MEMORY_TEMP),
                "DCGM_FI_DEV_GPU_TEMP": pynvml.nvmlDeviceGetTemperature(
                    handle, pynvml.NVML_TEMPERATURE_GPU),
                "DCGM_FI_DEV_POWER_USAGE": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                    pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": pynvml.nvmlDeviceGetPcieReplayCounter(handle),
                "DCGM_FI_DEV_GPU_UTIL": util.gpu,
                "DCGM_FI_DEV_MEM_COPY_UTIL": util.memory,
                "DCGM_FI_DEV_ENC_UTIL": pynvml.nvmlDeviceGetEncoderUtilization(handle)[0],
                "DCGM_FI_DEV_DEC_UTIL": pynvml.nvmlDeviceGetDecoderUtilization(handle)[0],
                "DCGM_FI_DEV_FB_FREE": mem.free // MIB,
                "DCGM_FI_DEV_FB_USED": mem.used // MIB,
                "DCGM_FI_DEV_FB_RESERVED": mem.reserved // MIB,
                "DCGM_FI_DEV_FB_TOTAL": mem.total // MIB,
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": fields.get(FI_REMAP_UNC),
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": fields.get(FI_REMAP_COR),
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": fields.get(FI_REMAP_FAILURE),
            }
            for name, value in values.items():
                if value is not None:
                    g[name].labels(*labels).set(value)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        self.update()
        output = generate_latest(self.registry)
        headers = {"Content-Type": TEXT_CONTENT_TYPE}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            output = gzip.compress(output)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=output, headers=headers)


async def handle_ready(request: web.Request) -> web.Response:
    return web.Response(text="ready\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    exporter = NaiveExporter()
    app = web.Application()
    app.router.add_get("/metrics", exporter.handle_metrics)
    app.router.add_get("/ready", handle_ready)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
