"""The NVML backend (with `nvml/device.py`, `nvml/gpm.py`, `nvml/mig.py`, `nvml/processes.py`:
the only pynvml importers).

Every call here is blocking and runs on the collector's single NVML thread. Failures are
recorded, never raised: `NOT_SUPPORTED` removes one series (and is remembered, so the call
is not repeated every pass), a lost GPU removes that GPU's series and is retried next pass.
A GPU bound to or unbound from the nvidia driver restarts NVML before the pass (binding.py).
"""

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import pynvml

from ..backend import BackendUnavailable
from ..fields.spec import FieldSpec, GpmMetric, MigScope
from ..fields.table import EVENT_FIELDS, IMPLEMENTED, P2P_FIELD, PROFILING_FIELDS
from ..model import DeviceIdentity, FieldValue, GpuInstance, GpuSnapshot, NodeSnapshot, SampleError
from .binding import NVIDIA_DRIVER_DIR, UNBIND_GRACE_SECONDS, BindingWatch, bound_devices
from .cadence import DEFAULT_SLOW_INTERVAL_SECONDS, SlowReadings
from .device import (
    GPU_FATAL,
    SOURCE,
    UNSUPPORTED,
    DeviceReader,
    GpuFailed,
    error_reason,
    text,
)
from .fields import NvlinkRates
from .gpm import GpmSampler, SampleKey, device_supports_gpm
from .mig import MigProfiles, entity_ids
from .processes import InstanceProcesses, ProcessReader, running_processes
from .topology import P2pReader

log = logging.getLogger(__name__)

# Answers that mean the driver under NVML went away or changed: re-initialise NVML.
DRIVER_GONE = frozenset({
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
})


class NvmlBackend:
    """GPU samples from the NVIDIA driver through nvidia-ml-py."""

    name = "nvml"

    def __init__(self, slow_interval_seconds: float = DEFAULT_SLOW_INTERVAL_SECONDS,
                 driver_dir: Path = NVIDIA_DRIVER_DIR) -> None:
        self.unsupported: set[tuple[str, object]] = set()
        self.nvlink_rates = NvlinkRates()  # per GPU: the last NVLink counters, for the rate
        self._slow = SlowReadings(slow_interval_seconds)
        self._p2p = P2pReader(slow_interval_seconds)
        self._identities: dict[int, DeviceIdentity] = {}
        self._profiles = MigProfiles()
        """GPU UUID → GPU instance profile id → (profile index, name, compute slices)."""
        self._system: dict[str, str | None] = {}
        self._gpm = GpmSampler()
        self._gpm_devices: dict[str, bool] = {}  # UUID → supports GPM
        self._mig_modes: dict[str, bool] = {}  # UUID → MIG mode seen last pass
        self._processes = ProcessReader()
        self._open = False
        self._gpu_count = 0
        self._driver_dir = driver_dir
        self._binding = BindingWatch()

    def open(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise BackendUnavailable(
                error_reason(exc), f"NVML initialisation failed: {exc}"
            ) from None
        self._open = True
        # A new session (maybe a new driver): ask again what each GPU supports.
        self.unsupported.clear()
        self._system.clear()
        self._slow.clear()  # a driver reload may have reset every counter
        self._p2p.clear()
        self._gpm_devices.clear()
        self._processes.clear()  # a new NVML session: ask for its whole sample history
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            log.debug("GPM support check skipped: %s", exc)
            count = 0
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = text(pynvml.nvmlDeviceGetUUID(handle))
            except pynvml.NVMLError as exc:  # a lost GPU: checked when it returns
                log.debug("GPM support check of GPU %d failed: %s", index, exc)
                continue
            self._gpm_devices[uuid] = device_supports_gpm(handle)

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
        # Event-counted fields (XIDs, clock-event counts) are not pass readings.
        specs = [IMPLEMENTED[f] for f in sorted(fields)
                 if f in IMPLEMENTED and f not in EVENT_FIELDS]
        errors: list[SampleError] = []
        before = self._follow_binding()
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            if exc.value in DRIVER_GONE:  # a driver reload or upgrade: NVML must start over
                raise BackendUnavailable(error_reason(exc), f"NVML lost the driver: {exc}") \
                    from None
            errors.append(SampleError(SOURCE, error_reason(exc)))
            count = max(self._identities, default=-1) + 1
        self._gpu_count = count
        gpus = tuple(self._sample_gpu(i, specs, errors) for i in range(count))
        if P2P_FIELD in fields:
            gpus = self._p2p.add_to(gpus, errors)
        self._gpm.prune()
        driver = self.system_value("nvmlSystemGetDriverVersion") or ""
        listed = {g.identity for g in gpus}
        return NodeSnapshot(gpus=gpus, driver_version=driver, errors=tuple(errors),
                            rebound=frozenset(i.uuid for i in before if i not in listed))

    def _follow_binding(self) -> tuple[DeviceIdentity, ...]:
        """A GPU bound or unbound since the last pass: NVML starts over, after a grace for an
        unbind, which waits in the driver while NVML holds the GPU open (binding.py). The GPUs
        known before, when it did."""
        bound, unbound = self._binding.change(bound_devices(self._driver_dir))
        if not bound and not unbound:
            return ()
        log.info("GPUs bound to the nvidia driver changed (bound: %s; unbound: %s): "
                 "restarting NVML to enumerate them again", ", ".join(sorted(bound)) or "none",
                 ", ".join(sorted(unbound)) or "none")
        self.close()
        if unbound:
            time.sleep(UNBIND_GRACE_SECONDS)
        before = tuple(self._identities.values())
        self._identities.clear()  # indexes move with the GPUs
        self.open()  # raises BackendUnavailable when NVML does not come back: reopened later
        return before

    def _identity(self, index: int, handle: Any) -> DeviceIdentity:
        uuid = text(pynvml.nvmlDeviceGetUUID(handle))
        known = self._identities.get(index)
        if known is not None and known.uuid == uuid:
            return known
        try:
            minor: int | None = int(pynvml.nvmlDeviceGetMinorNumber(handle))
        except pynvml.NVMLError as exc:
            if exc.value in GPU_FATAL:
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
            reader = DeviceReader(self, handle, ident.uuid, errors, index)
            reader.gpm = self._gpm_metrics(handle, (ident.uuid, None), specs, errors, index)
            fast, slow = self._slow.split(specs)
            refresh = self._slow.due(ident.uuid)
            values = self._read(reader, fast)
            failures = len(errors)
            slow_values = self._read(reader, slow) if refresh else dict(
                self._slow.values(ident.uuid))
            mig_enabled = self._mig_enabled(reader, handle, ident.uuid, refresh)
            if refresh:
                self._slow.store(ident.uuid, slow_values, mig_enabled,
                                 complete=len(errors) == failures,
                                 phase=index / max(1, self._gpu_count))
                slow_values = dict(self._slow.values(ident.uuid))
            values.update(slow_values)
            by_instance: InstanceProcesses = {}  # filled by the MIG handles, for attribution
            instances = (
                self._safe_instances(handle, ident.uuid, specs, errors, index, by_instance)
                if mig_enabled
                else ()
            )
            processes = self._processes.read(reader, handle, ident.uuid, by_instance)
        except GpuFailed as exc:
            return self._failed(index, exc.reason, str(exc), errors)
        return GpuSnapshot(ident, True, None, values, mig_enabled, instances, processes)

    @staticmethod
    def _read(reader: DeviceReader, specs: list[FieldSpec]) -> dict[str, FieldValue]:
        """One batched field-value call for these specs, then each source once."""
        reader.prefetch_field_values(s.source for s in specs)
        return {spec.name: v for spec in specs if (v := reader.read(spec)) is not None}

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
            if exc.value in GPU_FATAL:
                raise GpuFailed(exc) from None
            if exc.value in UNSUPPORTED:
                self.unsupported.add((uuid, ("gpm", key[1])))
            else:
                errors.append(SampleError(SOURCE, error_reason(exc), index))
            return {}

    def _failed(self, index: int, reason: str, message: str,
                errors: list[SampleError]) -> GpuSnapshot:
        errors.append(SampleError(SOURCE, reason, index))
        ident = self._identities.get(index) or DeviceIdentity(index, "", "", "")
        self._slow.forget(ident.uuid)  # read in full when it answers again
        return GpuSnapshot(ident, healthy=False, error=message)

    def _mig_enabled(self, reader: DeviceReader, handle: Any, uuid: str, refresh: bool) -> bool:
        """On the slow cadence: changing MIG mode takes a GPU reset, which the pass sees as
        a lost GPU (and a lost GPU is read in full when it returns)."""
        cached = self._slow.mig_mode(uuid)
        if not refresh and cached is not None:
            return cached
        mode = reader.call("mig_mode", lambda: pynvml.nvmlDeviceGetMigMode(handle))
        enabled = bool(mode and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE)
        if self._mig_modes.setdefault(uuid, enabled) != enabled:
            # MIG mode changes what NVML supports (GPU_UTIL is NOT_SUPPORTED in MIG mode):
            # forget this GPU's remembered NOT_SUPPORTED answers and ask again.
            self._mig_modes[uuid] = enabled
            self.unsupported = {k for k in self.unsupported if k[0] != uuid or k[1] == "mig_mode"}
        return enabled

    def _safe_instances(self, parent: Any, parent_uuid: str, specs: list[FieldSpec],
                        errors: list[SampleError], index: int,
                        by_instance: InstanceProcesses) -> tuple[GpuInstance, ...]:
        try:
            return self._instances(parent, parent_uuid, specs, errors, index, by_instance)
        except pynvml.NVMLError as exc:
            if exc.value in GPU_FATAL:
                raise GpuFailed(exc) from None
            errors.append(SampleError(SOURCE, error_reason(exc), index))
            return ()

    def _instances(self, parent: Any, parent_uuid: str, specs: list[FieldSpec],
                   errors: list[SampleError], index: int,
                   by_instance: InstanceProcesses) -> tuple[GpuInstance, ...]:
        """Enumerated every pass, so a MIG reconfiguration shows up without a restart."""
        instance_specs = [s for s in specs if s.mig is MigScope.INSTANCE]
        by_gi: dict[int, GpuInstance] = {}
        ranks: dict[int, int] = {}  # GI id → its profile's index
        slots = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent))
        for slot in range(slots):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
                gi = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
                if gi in by_gi:  # several compute instances in one GPU instance: one series set
                    continue
                ci = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
                mig_uuid = text(pynvml.nvmlDeviceGetUUID(mig))
            except pynvml.NVMLError as exc:
                if exc.value in GPU_FATAL:
                    raise
                if exc.value != pynvml.NVML_ERROR_NOT_FOUND:  # one bad slot hides only itself
                    errors.append(SampleError(SOURCE, error_reason(exc), index))
                continue
            reader = DeviceReader(self, mig, mig_uuid, errors, index)
            reader.gpm = self._gpm_metrics(parent, (parent_uuid, gi), instance_specs, errors, index)
            values = {s.name: v for s in instance_specs if (v := reader.read(s)) is not None}
            by_instance[gi] = running_processes(reader, mig)
            p = self._profiles.profile(parent, parent_uuid, gi, errors, index)
            ranks[gi] = p.rank
            by_gi[gi] = GpuInstance(gi, ci, p.name, mig_uuid, values, p.start,
                                    slices=p.slices, gpu_slices=p.gpu_slices)
        entity = entity_ids(index, slots, ranks)  # what `-d i:IDS` names
        return tuple(dataclasses.replace(by_gi[gi], entity_id=entity[gi]) for gi in sorted(by_gi))
