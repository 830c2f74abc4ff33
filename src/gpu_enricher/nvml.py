"""The NVML backend: the only module that imports pynvml.

Every call here is blocking and runs on the collector's single NVML thread. Failures are
recorded, never raised: `NOT_SUPPORTED` removes one series (and is remembered, so the call
is not repeated every pass), a lost GPU removes that GPU's series and is retried next pass.
"""

import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

import pynvml

from .backend import BackendUnavailable
from .fields import (
    IMPLEMENTED,
    PROFILING_FIELDS,
    DeviceCall,
    FieldSpec,
    GpmMetric,
    MemoryInfo,
    MigScope,
    NvmlFieldValue,
    Source,
    SystemCall,
)
from .model import (
    DeviceIdentity,
    FieldValue,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    ProcessSample,
    SampleError,
)
from .nvml_gpm import GpmSampler, SampleKey, device_supports_gpm

log = logging.getLogger(__name__)

SOURCE: Final = "nvml"

# Errors after which nothing more is asked of the GPU this pass: it is gone or broken.
_GPU_FATAL: Final = frozenset({
    pynvml.NVML_ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_UNKNOWN,
    pynvml.NVML_ERROR_RESET_REQUIRED,
    pynvml.NVML_ERROR_GPU_NOT_FOUND,
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
})
# Stable answers about a device's abilities: remembered per GPU UUID.
_UNSUPPORTED: Final = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
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


class _DeviceReader:
    """Reads sources of one device handle, each at most once per pass."""

    def __init__(self, backend: "NvmlBackend", handle: Any, uuid: str, errors: list[SampleError],
                 gpu_index: int) -> None:
        self._backend = backend
        self._handle = handle
        self._uuid = uuid
        self._errors = errors
        self._gpu_index = gpu_index
        self._cache: dict[object, Any] = {}
        self._field_values: dict[int, int | float] | None = None
        self.gpm: dict[int, float] = {}

    def call(self, key: object, fn: Callable[[], Any]) -> Any:
        """Run one NVML query; None when unsupported or failed (recorded)."""
        if (self._uuid, key) in self._backend.unsupported:
            return None
        try:
            return fn()
        except pynvml.NVMLError as exc:
            if exc.value in _GPU_FATAL:
                raise GpuFailed(exc) from None
            if exc.value in _UNSUPPORTED:
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
            return self._field_value(source.field_id)
        if isinstance(source, SystemCall):
            return self._backend.system_value(source.function)
        return self.gpm.get(source.metric_id)

    def _memory(self) -> Any:
        # v2 separates `reserved` from `used`; v1 (old drivers) folds it into `used`.
        v2 = self.call(
            "memory_v2",
            lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle, version=pynvml.nvmlMemory_v2),
        )
        if v2 is not None:
            return v2
        return self.call("memory_v1", lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle))

    def prefetch_field_values(self, ids: Iterable[int]) -> None:
        """One `nvmlDeviceGetFieldValues` call for every field-value id of this device."""
        wanted = sorted(set(ids))
        self._field_values = {}
        if not wanted:
            return
        result = self.call(
            ("field_values", tuple(wanted)),
            lambda: pynvml.nvmlDeviceGetFieldValues(self._handle, wanted),
        )
        for entry in result or ():
            if entry.nvmlReturn != pynvml.NVML_SUCCESS:
                continue
            reader = _VALUE_READERS.get(entry.valueType)
            if reader is not None:
                self._field_values[int(entry.fieldId)] = reader(entry.value)

    def _field_value(self, field_id: int) -> int | float | None:
        if self._field_values is None:
            self.prefetch_field_values([field_id])
        assert self._field_values is not None
        return self._field_values.get(field_id)

    def processes(self) -> tuple[ProcessSample, ...]:
        procs = self.call(
            "processes", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        )
        return tuple(
            ProcessSample(
                pid=int(p.pid),
                used_memory_bytes=p.usedGpuMemory,
                gpu_instance_id=None if p.gpuInstanceId == 0xFFFFFFFF else p.gpuInstanceId,
            )
            for p in procs or ()
        )


class NvmlBackend:
    """GPU samples from the NVIDIA driver through nvidia-ml-py."""

    name = "nvml"

    def __init__(self) -> None:
        self.unsupported: set[tuple[str, object]] = set()
        self._identities: dict[int, DeviceIdentity] = {}
        self._profile_names: dict[str, dict[int, str]] = {}
        self._system: dict[str, str | None] = {}
        self._gpm = GpmSampler()
        self._gpm_devices: dict[str, bool] = {}  # UUID → supports GPM
        self._open = False

    def open(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise BackendUnavailable(
                error_reason(exc), f"NVML initialisation failed: {exc}"
            ) from None
        self._open = True
        self._system.clear()
        self._gpm_devices.clear()
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = text(pynvml.nvmlDeviceGetUUID(handle))
                self._gpm_devices[uuid] = device_supports_gpm(handle)
        except pynvml.NVMLError as exc:  # a lost GPU: its fields show up when it returns
            log.debug("GPM support check stopped: %s", exc)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._gpm.close()
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown failed: %s", exc)

    def deliverable_fields(self) -> frozenset[str]:
        """Profiling fields need NVML GPM (Hopper and newer) on at least one GPU."""
        if any(self._gpm_devices.values()):
            return frozenset(IMPLEMENTED)
        return frozenset(IMPLEMENTED) - PROFILING_FIELDS

    def system_value(self, function: str) -> str | None:
        """Node-wide strings (driver version): fixed while NVML stays initialised."""
        if function not in self._system:
            try:
                self._system[function] = text(getattr(pynvml, function)())
            except pynvml.NVMLError:
                self._system[function] = None
        return self._system[function]

    def sample(self, fields: frozenset[str]) -> NodeSnapshot:
        specs = [IMPLEMENTED[f] for f in sorted(fields) if f in IMPLEMENTED]
        errors: list[SampleError] = []
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            errors.append(SampleError(SOURCE, error_reason(exc)))
            count = max(self._identities, default=-1) + 1
        gpus = tuple(self._sample_gpu(i, specs, errors) for i in range(count))
        self._gpm.prune()
        driver = self.system_value("nvmlSystemGetDriverVersion") or ""
        return NodeSnapshot(gpus=gpus, driver_version=driver, errors=tuple(errors))

    def _identity(self, index: int, handle: Any) -> DeviceIdentity:
        uuid = text(pynvml.nvmlDeviceGetUUID(handle))
        known = self._identities.get(index)
        if known is not None and known.uuid == uuid:
            return known
        try:
            minor: int | None = int(pynvml.nvmlDeviceGetMinorNumber(handle))
        except pynvml.NVMLError as exc:
            if exc.value in _GPU_FATAL:
                raise
            minor = None
        ident = DeviceIdentity(
            index=index,
            uuid=uuid,
            pci_bus_id=text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
            model_name=text(pynvml.nvmlDeviceGetName(handle)),
            minor_number=minor,
        )
        self._identities[index] = ident
        return ident

    def _sample_gpu(self, index: int, specs: list[FieldSpec],
                    errors: list[SampleError]) -> GpuSnapshot:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            ident = self._identity(index, handle)
        except pynvml.NVMLError as exc:
            return self._failed(index, error_reason(exc), str(exc), errors)
        try:
            reader = _DeviceReader(self, handle, ident.uuid, errors, index)
            reader.prefetch_field_values(
                s.source.field_id for s in specs if isinstance(s.source, NvmlFieldValue)
            )
            reader.gpm = self._gpm_metrics(handle, (ident.uuid, None), specs, errors, index)
            values: dict[str, FieldValue] = {}
            for spec in specs:
                value = reader.read(spec)
                if value is not None:
                    values[spec.name] = value
            mig_enabled = self._mig_enabled(reader, handle)
            instances = (
                self._safe_instances(handle, ident.uuid, specs, errors, index)
                if mig_enabled
                else ()
            )
            processes = reader.processes()
        except GpuFailed as exc:
            return self._failed(index, exc.reason, str(exc), errors)
        return GpuSnapshot(ident, True, None, values, mig_enabled, instances, processes)

    def _gpm_metrics(self, handle: Any, key: SampleKey, specs: list[FieldSpec],
                     errors: list[SampleError], index: int) -> dict[int, float]:
        ids = sorted({s.source.metric_id for s in specs if isinstance(s.source, GpmMetric)})
        uuid = key[0]
        if not ids or (uuid, ("gpm", key[1])) in self.unsupported:
            return {}
        if uuid not in self._gpm_devices:  # a GPU that appeared (or returned) after open
            self._gpm_devices[uuid] = device_supports_gpm(handle)
        if not self._gpm_devices[uuid]:
            return {}
        try:
            return self._gpm.metrics(handle, key, ids)
        except pynvml.NVMLError as exc:
            if exc.value in _GPU_FATAL:
                raise GpuFailed(exc) from None
            if exc.value in _UNSUPPORTED:
                self.unsupported.add((uuid, ("gpm", key[1])))
            else:
                errors.append(SampleError(SOURCE, error_reason(exc), index))
            return {}

    def _failed(self, index: int, reason: str, message: str,
                errors: list[SampleError]) -> GpuSnapshot:
        errors.append(SampleError(SOURCE, reason, index))
        ident = self._identities.get(index) or DeviceIdentity(index, "", "", "")
        return GpuSnapshot(ident, healthy=False, error=message)

    def _mig_enabled(self, reader: _DeviceReader, handle: Any) -> bool:
        mode = reader.call("mig_mode", lambda: pynvml.nvmlDeviceGetMigMode(handle))
        return bool(mode and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE)

    def _safe_instances(self, parent: Any, parent_uuid: str, specs: list[FieldSpec],
                        errors: list[SampleError], index: int) -> tuple[GpuInstance, ...]:
        try:
            return self._instances(parent, parent_uuid, specs, errors, index)
        except pynvml.NVMLError as exc:
            if exc.value in _GPU_FATAL:
                raise GpuFailed(exc) from None
            errors.append(SampleError(SOURCE, error_reason(exc), index))
            return ()

    def _instances(self, parent: Any, parent_uuid: str, specs: list[FieldSpec],
                   errors: list[SampleError], index: int) -> tuple[GpuInstance, ...]:
        """Enumerated every pass, so a MIG reconfiguration shows up without a restart."""
        instance_specs = [s for s in specs if s.mig is MigScope.INSTANCE]
        by_gi: dict[int, GpuInstance] = {}
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_NOT_FOUND:
                    continue
                raise
            gi = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
            if gi in by_gi:  # several compute instances in one GPU instance: one series set
                continue
            ci = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
            mig_uuid = text(pynvml.nvmlDeviceGetUUID(mig))
            reader = _DeviceReader(self, mig, mig_uuid, errors, index)
            reader.gpm = self._gpm_metrics(parent, (parent_uuid, gi), instance_specs, errors, index)
            values = {s.name: v for s in instance_specs if (v := reader.read(s)) is not None}
            profile = self._profile_name(parent, parent_uuid, gi, errors, index)
            by_gi[gi] = GpuInstance(gi, ci, profile, mig_uuid, values)
        return tuple(by_gi[gi] for gi in sorted(by_gi))

    def _profile_name(self, parent: Any, parent_uuid: str, gi: int,
                      errors: list[SampleError], index: int) -> str:
        """`nvmlGpuInstanceGetInfo` gives the profile id, the profile table its name."""
        try:
            info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(parent, gi))
        except pynvml.NVMLError as exc:
            if exc.value in _GPU_FATAL:
                raise
            errors.append(SampleError(SOURCE, error_reason(exc), index))
            return ""
        table = self._profile_names.get(parent_uuid)
        if table is None:
            table = {}
            for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    p = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile, version=2)
                except pynvml.NVMLError:
                    continue
                table[int(p.id)] = text(p.name).removeprefix("MIG ")
            if table:  # profiles are fixed per GPU; an empty answer is retried next time
                self._profile_names[parent_uuid] = table
        return table.get(int(info.profileId), "")
