"""The simulated node: the same `GpuBackend` interface as NVML, values from a scenario.

Values move over time so dashboards show life, deterministically: every value is a
function of (seed, GPU, field, elapsed seconds), so a test that fixes the clock gets the
same numbers every run.
"""

import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Callable

from ..fields.convert import MIB
from ..fields.namings import with_base_units
from ..fields.table import IMPLEMENTED, P2P_FIELD
from ..model import (
    DeviceIdentity,
    FieldValue,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    ProcessSample,
    SampleError,
)
from .churn import churned
from .node import Range, Scenario, SimGpu, SimInstance, SimProcess, mig_uuid

log = logging.getLogger(__name__)


def _bound(gpu: SimGpu, t: float) -> bool:
    """Bound for the first `unbound_every_seconds`, unbound for the next, and so on."""
    every = gpu.unbound_every_seconds
    return every is None or int(t // every) % 2 == 0


class SimulatedBackend:
    name = "simulated"

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic) -> None:
        self.scenario = scenario
        self._clock = clock
        self._start = clock()
        self._churned: tuple[int, tuple[SimGpu, ...]] = (0, scenario.gpus)
        self._unbound: frozenset[str] = frozenset()  # UUIDs unbound at the last pass
        self._energy: dict[str, tuple[float, float]] = {}  # UUID → (t, mJ) at the last pass

    def open(self) -> None:
        self._start = self._clock()

    def close(self) -> None:
        pass

    def deliverable_fields(self) -> frozenset[str]:
        """As NVML: profiling fields only when some GPU has GPM, so a counters file asking
        for them on an A100-only node gets the same one-line warnings as on real hardware."""
        if any(gpu.gpm for gpu in self.scenario.gpus):
            return frozenset(IMPLEMENTED)
        return frozenset(f for f in IMPLEMENTED if not f.startswith("DCGM_FI_PROF_"))

    def _phase(self, *key: object) -> float:
        digest = hashlib.blake2b(repr((self.scenario.seed, *key)).encode(), digest_size=8)
        return int.from_bytes(digest.digest()) / 2**64

    def _load(self, t: float, *key: object) -> float:
        """0..1: a slow wave with a seeded phase plus a little seeded per-second jitter."""
        omega = 2 * math.pi / self.scenario.period_seconds
        wave = 0.5 + 0.5 * math.sin(omega * t + 2 * math.pi * self._phase(*key))
        jitter = self._phase(*key, int(t)) - 0.5
        return min(1.0, max(0.0, 0.9 * wave + 0.2 * jitter + 0.05))

    @staticmethod
    def _within(bounds: Range, load: float) -> float:
        low, high = bounds
        return low + (high - low) * load

    def _energy_mj(self, gpu: SimGpu, t: float, watts: float) -> int:
        # The power shown, integrated over the passes: monotonic as the real counter is, and
        # what the per-pod energy counters add up to (docs/chargeback.md).
        at, energy = self._energy.get(gpu.uuid, (t, 1e6 * (gpu.index + 1)))
        energy += 1000 * watts * max(0.0, t - at)
        self._energy[gpu.uuid] = (t, energy)
        return int(energy)

    def sample(self, fields: frozenset[str]) -> NodeSnapshot:
        t = self._clock() - self._start
        gpus: list[GpuSnapshot] = []
        errors: list[SampleError] = []
        unbound = frozenset(g.uuid for g in self._gpus() if not _bound(g, t))
        if unbound != self._unbound:  # as NVML's backend says it (nvml/binding.py)
            log.info("simulated: GPUs bound to the driver changed (unbound now: %s)",
                     ", ".join(sorted(unbound)) or "none")
        rebound, self._unbound = unbound - self._unbound, unbound
        for gpu in self._gpus():
            if gpu.uuid in unbound:
                continue
            snap = self._gpu(gpu, t, fields)
            if P2P_FIELD in fields and snap.healthy:
                snap = dataclasses.replace(snap, p2p_nvlink=self._p2p(gpu))
            if not snap.healthy:
                errors.append(SampleError(self.name, "GpuIsLost", gpu.index))
            gpus.append(snap)
        return NodeSnapshot(tuple(gpus), self.scenario.driver_version, tuple(errors),
                            rebound=rebound)

    def _gpus(self) -> tuple[SimGpu, ...]:
        """The GPUs as the pod churn has left them: their processes follow the pods."""
        generation = self.scenario.churn_clock.generation
        if generation != self._churned[0]:
            self._churned = (generation, churned(self.scenario, generation).gpus)
        return self._churned[1]

    def _gpu(self, gpu: SimGpu, t: float, fields: frozenset[str]) -> GpuSnapshot:
        ident = DeviceIdentity(gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.model, gpu.index)
        if gpu.lost:
            return GpuSnapshot(ident, healthy=False, error="simulated: GPU is lost")
        load = self._load(t, gpu.index)
        util = round(self._within(gpu.utilization, load))
        used = round(self._within(gpu.memory_used_mib, self._load(t, gpu.index, "fb")))
        reserved = max(1, gpu.memory_mib // 160)
        busy = util / 100
        power = round(self._within(gpu.power_watts, load), 3)
        values: dict[str, FieldValue] = {
            "DCGM_FI_DRIVER_VERSION": self.scenario.driver_version,
            "DCGM_FI_NVML_VERSION": f"13.{self.scenario.driver_version}",
            "DCGM_FI_DEV_SERIAL": f"{1650924000000 + gpu.index}",
            "DCGM_FI_DEV_VBIOS_VERSION": "96.00.89.00.01",
            "DCGM_FI_DEV_GPU_UTIL": util,
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.6),
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_FB_TOTAL": gpu.memory_mib,
            "DCGM_FI_DEV_FB_RESERVED": reserved,
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_DEV_FB_FREE": max(0, gpu.memory_mib - reserved - used),
            "DCGM_FI_DEV_POWER_USAGE": power,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self._energy_mj(gpu, t, power),
            "DCGM_FI_DEV_SM_CLOCK": round(self._within(gpu.sm_clock_mhz, load)),
            "DCGM_FI_DEV_MEM_CLOCK": gpu.mem_clock_mhz,
            "DCGM_FI_DEV_GPU_TEMP": round(self._within(gpu.temperature, load)),
            "DCGM_FI_DEV_MEMORY_TEMP": round(self._within(gpu.temperature, load)) + 6,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 0,
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            **self._limits(gpu, t, busy),
            **(self._profiling(busy, t, gpu.index) if gpu.gpm else {}),
        }
        instances = _with_entity_ids(
            gpu.index, tuple(self._instance(gpu, inst, t, fields) for inst in gpu.instances))
        if instances:  # a MIG GPU as NVML reads it whole (what `-d g` shows)
            values = _mig_parent(values, instances)
        processes = tuple(self._process(p, t, mig=bool(gpu.instances)) for p in gpu.processes)
        return GpuSnapshot(
            ident,
            values={k: v for k, v in with_base_units(values).items() if k in fields},
            mig_enabled=bool(instances),
            instances=instances,
            processes=processes,
        )

    def _p2p(self, gpu: SimGpu) -> dict[int, int]:
        """NVLink P2P as on real boards: OK between GPUs of one NVLink baseboard (the same SXM
        model), TopologyNotSupported (3) between different boards, NotSupported (5) for a PCIe
        card."""
        def nvlink(model: str) -> bool:
            return "SXM" in model or "HBM3" in model

        return {peer.index: (5 if not (nvlink(gpu.model) and nvlink(peer.model))
                             else 0 if peer.model == gpu.model else 3)
                for peer in self.scenario.gpus if peer.index != gpu.index and not peer.lost}

    def _process(self, proc: SimProcess, t: float, mig: bool) -> ProcessSample:
        """As NVML: per-process utilisation is NOT_SUPPORTED in MIG mode (None)."""
        sm = None if mig else round(self._within(proc.sm_utilization,
                                                 self._load(t, "pid", proc.pid)), 4)
        return ProcessSample(proc.pid, proc.used_memory_mib * MIB, proc.gpu_instance_id, sm,
                             None if sm is None else round(0.4 * sm, 4), proc.kind)

    def _limits(self, gpu: SimGpu, t: float, busy: float) -> dict[str, FieldValue]:
        """Power limits, throttling and identity labels as a passively cooled data-centre GPU
        reports them: no fan, no retired pages (row remapping replaced them), no NVLink. A GPU
        with `thermal_slowdown` is held back by HW thermal slowdown the whole time."""
        limit = round(max(gpu.power_watts[1] * 1.1, 70.0))
        power_capped = busy > 0.9
        # Throttling time grows while the GPU runs into its power cap (ns, monotonic).
        capped_ns = int(1e9 * t * 0.05 * (gpu.power_watts[1] > 300))
        # 0x4: software power cap; 0x1: GPU idle; 0x40: HW thermal slowdown (NVML's
        # clocks-event reason bits).
        reasons = 0x4 if power_capped else (0x1 if busy < 0.05 else 0)
        if gpu.thermal_slowdown:
            reasons |= 0x40
        return {
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": float(limit),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN": float(round(limit * 0.3)),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX": float(limit),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF": float(limit),
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": float(limit),
            "DCGM_FI_DEV_PSTATE": 0 if busy > 0.05 else 8,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": reasons,
            "DCGM_FI_DEV_POWER_VIOLATION": capped_ns,
            # Slowed down the whole time: the time grows with the clock (ns, monotonic).
            "DCGM_FI_DEV_THERMAL_VIOLATION": int(1e9 * t) if gpu.thermal_slowdown else 0,
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": 0,
            "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": 0,
            # An always idle GPU is held back by low utilisation the whole time.
            "DCGM_FI_DEV_LOW_UTIL_VIOLATION": int(1e9 * t) if gpu.utilization[1] == 0 else 0,
            "DCGM_FI_DEV_RELIABILITY_VIOLATION": 0,
            "DCGM_FI_DEV_BRAND": "NVIDIA",
            "DCGM_FI_DEV_INFOROM_IMAGE_VER": "G520.0200.00.05",
        }

    def _profiling(self, busy: float, t: float, *key: object) -> dict[str, FieldValue]:
        jitter = self._load(t, *key, "prof")
        return {
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(busy, 6),
            "DCGM_FI_PROF_SM_ACTIVE": round(busy * 0.92, 6),
            "DCGM_FI_PROF_SM_OCCUPANCY": round(busy * 0.55, 6),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(busy * (0.35 + 0.3 * jitter), 6),
            "DCGM_FI_PROF_DRAM_ACTIVE": round(busy * (0.25 + 0.3 * jitter), 6),
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0,
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE": round(busy * 0.2, 6),
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE": round(busy * 0.15 * jitter, 6),
            "DCGM_FI_PROF_PCIE_TX_BYTES": round(busy * 2.1e9 * jitter, 1),
            "DCGM_FI_PROF_PCIE_RX_BYTES": round(busy * 3.4e9 * jitter, 1),
        }

    def _instance(
        self, gpu: SimGpu, inst: SimInstance, t: float, fields: frozenset[str]
    ) -> GpuInstance:
        key = (gpu.index, "gi", inst.gpu_instance_id)
        used = round(self._within(inst.memory_used_mib, self._load(t, *key, "fb")))
        busy = self._within(inst.activity, self._load(t, *key))
        values: dict[str, FieldValue] = {
            "DCGM_FI_DEV_FB_TOTAL": inst.memory_mib,
            "DCGM_FI_DEV_FB_RESERVED": 0,
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_DEV_FB_FREE": max(0, inst.memory_mib - used),
            **(self._profiling(busy, t, *key) if gpu.gpm else {}),
        }
        return GpuInstance(
            inst.gpu_instance_id, 0, inst.profile, mig_uuid(gpu.uuid, inst.gpu_instance_id),
            {k: v for k, v in with_base_units(values).items() if k in fields},
            slices=_slices(inst.profile), gpu_slices=MIG_SLOTS,
        )


def _mig_parent(values: dict[str, FieldValue],
                instances: tuple[GpuInstance, ...]) -> dict[str, FieldValue]:
    """NVML on a GPU in MIG mode: no utilisation (NOT_SUPPORTED), and the memory its instances
    use."""
    used = sum(int(i.values.get("DCGM_FI_DEV_FB_USED", 0)) for i in instances)
    total, reserved = int(values["DCGM_FI_DEV_FB_TOTAL"]), int(values["DCGM_FI_DEV_FB_RESERVED"])
    kept = {k: v for k, v in values.items()
            if k not in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL")}
    return {**kept, "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_DEV_FB_FREE": max(0, total - reserved - used)}


MIG_SLOTS = 7
"""`nvmlDeviceGetMaxMigDeviceCount` of an A100 or H100, and their compute slices."""


def _slices(profile: str) -> int | None:
    """A simulated profile's compute slices, as NVML's `sliceCount` gives them: `3g.40gb` → 3."""
    slices = profile.partition("g.")[0]
    return int(slices) if slices.isdigit() else None


def _with_entity_ids(index: int, instances: tuple[GpuInstance, ...]) -> tuple[GpuInstance, ...]:
    """DCGM's GPU-instance entity ids, as nvml/backend.py numbers them; the profile index
    follows the slice count (`1g` before `2g` …) on the simulated boards."""
    def rank(inst: GpuInstance) -> tuple[int, int]:
        return (_slices(inst.profile) or MIG_SLOTS, inst.gpu_instance_id)

    entity = {inst.gpu_instance_id: index * MIG_SLOTS + n
              for n, inst in enumerate(sorted(instances, key=rank))}
    return tuple(dataclasses.replace(inst, entity_id=entity[inst.gpu_instance_id])
                 for inst in instances)
