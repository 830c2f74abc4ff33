"""Reading one NVML device handle: sources, per-call error handling, NVML error names.

Part of the NVML backend (with `nvml/backend.py`, `nvml/gpm.py` and `nvml/processes.py`, the only
importers of pynvml); runs only on the NVML thread.
"""

import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

import pynvml

from ..fields.convert import NvlinkDelta
from ..fields.spec import (
    DeviceCall,
    FieldSpec,
    GpmMetric,
    MemoryInfo,
    NvlinkThroughput,
    NvmlFieldValue,
    Source,
    SystemCall,
)
from ..model import FieldValue, SampleError
from .fields import FieldKey, NvlinkRates, field_value_keys, throughput_keys

SOURCE: Final = "nvml"

# Errors after which nothing more is asked of the GPU this pass: it is gone or broken.
GPU_FATAL: Final = frozenset({
    pynvml.NVML_ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_UNKNOWN,
    pynvml.NVML_ERROR_RESET_REQUIRED,
    pynvml.NVML_ERROR_GPU_NOT_FOUND,
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
})
# Stable answers about a device's abilities: remembered per GPU UUID.
UNSUPPORTED: Final = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,  # a v2 struct on an old driver
    pynvml.NVML_ERROR_NO_PERMISSION,
})
_VALUE_READERS: Final[dict[int, Callable[[Any], int | float]]] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: lambda v: float(v.dVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda v: int(v.uiVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda v: int(v.ulVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda v: int(v.ullVal),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda v: int(v.sllVal),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: lambda v: int(v.siVal),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: lambda v: int(v.usVal),
}


class GpuFailed(Exception):
    """Raised inside a pass when a GPU answers with a fatal error."""

    def __init__(self, error: pynvml.NVMLError) -> None:
        super().__init__(str(error))
        self.reason = error_reason(error)


def error_reason(error: pynvml.NVMLError) -> str:
    """`NVMLError_GpuIsLost` → `GpuIsLost`: short and bounded, usable as a label value."""
    name = type(error).__name__
    return name.removeprefix("NVMLError_") if name != "NVMLError" else f"code_{error.value}"


def call_key(source: Source) -> object:
    """Sources that one NVML call answers share a key: the call is made once per pass."""
    if isinstance(source, DeviceCall):
        return (source.function, source.args)
    if isinstance(source, MemoryInfo):
        return "memory"
    return source


def text(raw: Any) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


class ReaderContext(Protocol):
    """What a device reader needs from the backend: sticky NOT_SUPPORTED answers, node-wide
    strings and the NVLink counters' last readings (for their rate)."""

    unsupported: set[tuple[str, object]]
    nvlink_rates: NvlinkRates

    def system_value(self, function: str) -> str | None: ...


class DeviceReader:
    """Reads sources of one device handle, each at most once per pass."""

    def __init__(self, backend: ReaderContext, handle: Any, uuid: str, errors: list[SampleError],
                 gpu_index: int) -> None:
        self._backend = backend
        self._handle = handle
        self._uuid = uuid
        self._errors = errors
        self._gpu_index = gpu_index
        self._cache: dict[object, Any] = {}
        # (field id, scope) → (value, NVML's timestamp in µs); every key asked this pass is
        # in _asked, whether it answered or not.
        self._field_values: dict[FieldKey, tuple[int | float, int]] = {}
        self._asked: set[FieldKey] = set()
        self.gpm: dict[int, float] = {}

    def call(self, key: object, fn: Callable[[], Any]) -> Any:
        """Run one NVML query; None when unsupported or failed (recorded)."""
        if (self._uuid, key) in self._backend.unsupported:
            return None
        try:
            return fn()
        except pynvml.NVMLError as exc:
            if exc.value in GPU_FATAL:
                raise GpuFailed(exc) from None
            if exc.value in UNSUPPORTED:
                self._backend.unsupported.add((self._uuid, key))
            else:
                self._errors.append(SampleError(SOURCE, error_reason(exc), self._gpu_index))
            return None

    def read(self, spec: FieldSpec) -> FieldValue | None:
        source = spec.source
        key = call_key(source)
        if key in self._cache:
            raw = self._cache[key]
        else:
            raw = self._read_source(source)
            self._cache[key] = raw
        if raw is None:
            return None
        if isinstance(source, DeviceCall) and source.pick is not None:
            raw = raw[source.pick] if isinstance(source.pick, int) else getattr(raw, source.pick)
        elif isinstance(source, MemoryInfo):
            raw = getattr(raw, source.pick, None)
            if raw is None:
                return None
        return spec.convert(raw)

    def _read_source(self, source: Source) -> Any:
        handle = self._handle
        if isinstance(source, DeviceCall):
            fn = getattr(pynvml, source.function)
            return self.call(call_key(source), lambda: fn(handle, *source.args))
        if isinstance(source, MemoryInfo):
            return self._memory()
        if isinstance(source, NvmlFieldValue):
            value = self._field_value((source.field_id, source.scope_id))
            return None if value is None else value[0]
        if isinstance(source, NvlinkThroughput):
            return self._nvlink_rate(source)
        if isinstance(source, SystemCall):
            return self._backend.system_value(source.function)
        if isinstance(source, GpmMetric):
            return self.gpm.get(source.metric_id)
        return None  # EventCount: counted from events, never read in a pass

    def _memory(self) -> Any:
        # v2 separates `reserved` from `used`; v1 (old drivers) folds it into `used`.
        v2 = self.call(
            "memory_v2",
            lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle, version=pynvml.nvmlMemory_v2),
        )
        if v2 is not None:
            return v2
        return self.call("memory_v1", lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle))

    def prefetch_field_values(self, sources: Iterable[Source]) -> None:
        """One `nvmlDeviceGetFieldValues` call for every field-value entry these sources need
        that this pass has not asked for yet."""
        wanted = sorted({k for source in sources for k in field_value_keys(source)}
                        - self._asked)
        if not wanted:
            return
        self._asked.update(wanted)
        result = self.call(
            ("field_values", tuple(wanted)),
            lambda: pynvml.nvmlDeviceGetFieldValues(self._handle, wanted),
        )
        for key, entry in zip(wanted, result or (), strict=False):
            if entry.nvmlReturn != pynvml.NVML_SUCCESS:
                continue
            reader = _VALUE_READERS.get(entry.valueType)
            if reader is not None:
                self._field_values[key] = (reader(entry.value), int(entry.timestamp))

    def _field_value(self, key: FieldKey) -> tuple[int | float, int] | None:
        if key not in self._asked:  # a source read without a prefetch (a MIG instance)
            self.prefetch_field_values([NvmlFieldValue(*key)])
        return self._field_values.get(key)

    def _nvlink_rate(self, source: NvlinkThroughput) -> NvlinkDelta | None:
        """DCGM's NVLink throughput: RX + TX KiB counters since the last pass."""
        rx_key, tx_key = throughput_keys(source)
        rx, tx = self._field_value(rx_key), self._field_value(tx_key)
        if rx is None or tx is None:
            return None
        stamp = max(rx[1], tx[1]) or time.time_ns() // 1000
        return self._backend.nvlink_rates.rate(self._uuid, rx_key[1], int(rx[0]) + int(tx[0]),
                                               stamp)
