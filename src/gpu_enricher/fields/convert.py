"""NVML's answers in dcgm-exporter's units and texts: the parse half of every field. Pure."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from ..model import FieldValue

MIB: Final = 1 << 20
NVLINK_BYTES_PER_CLASSIC_UNIT: Final = 1024 * 1000
"""The classic NVLink figure is ΔKiB / Δs / 1000 (DCGM's "MB/s"); bytes/s is ΔKiB * 1024 / Δs."""


class NvlinkDelta(NamedTuple):
    """NVLink's RX + TX KiB counters between two passes: what both NVLink units are made of."""

    kib: int
    microseconds: int


def nvlink_classic(raw: Any) -> FieldValue:
    """DCGM's `DCGM_FI_DEV_NVLINK_BANDWIDTH_*` ("MB/s"): int(ΔKiB / Δs / 1000), in integers so
    that a steady counter gives the same figure every time."""
    return int(raw.kib) * 1000 // int(raw.microseconds)


def nvlink_bytes_per_second(raw: Any) -> FieldValue:
    """DCGM 4.7's `…_BYTES_PER_SECOND`: ΔKiB * 1024 / Δs."""
    return int(raw.kib) * 1024 * 1_000_000 // int(raw.microseconds)


def mhz_to_hz(raw: Any) -> FieldValue:
    return int(raw) * 1_000_000


def milli_to_whole(raw: Any) -> FieldValue:
    """mJ → whole J, as DCGM's integer `DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL`."""
    return int(raw) // 1000


def nanos_to_seconds(raw: Any) -> FieldValue:
    return int(raw) / 1e9


def as_int(raw: Any) -> FieldValue:
    return int(raw)


def bytes_to_mib(raw: Any) -> FieldValue:
    return int(raw) // MIB


def milli_to_unit(raw: Any) -> FieldValue:
    return int(raw) / 1000.0


def percent_to_ratio(raw: Any) -> FieldValue:
    return float(raw) / 100.0


def mib_per_s_to_bytes(raw: Any) -> FieldValue:
    return float(raw) * MIB


def as_text(raw: Any) -> FieldValue:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def count_of(raw: Any) -> FieldValue:
    return len(raw)


def milli_to_whole_unit(raw: Any) -> FieldValue:
    """DCGM's power limits: mW / 1000 in integer arithmetic, then a double (699999 → 699.0)."""
    return float(int(raw) // 1000)


# nvmlBrandType_t → DCGM_FI_DEV_BRAND's text, as DCGM writes it (its names from nvidia-smi);
# an id DCGM does not name (DLA, vGameDev, NPU, future ones) is "Unknown" there too.
BRAND_NAMES: Final[Mapping[int, str]] = MappingProxyType({
    0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan",
    7: "NVIDIA Virtual Applications", 8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server", 10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA vGaming", 12: "Quadro RTX", 13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX",
    16: "Titan RTX",
})


def brand_name(raw: Any) -> FieldValue:
    return BRAND_NAMES.get(int(raw), "Unknown")


_GRID_LICENSE_FEATURE_CODE_VGPU: Final = 1


def vgpu_license(raw: Any) -> FieldValue | None:
    """As DCGM: 0 when the GPU has no vGPU licensing, else 1 if the vGPU feature is licensed
    (featureState > 0), 0 if not; no value when no vGPU feature is listed."""
    if not raw.isGridLicenseSupported:
        return 0
    for feature in raw.gridLicensableFeatures[:raw.licensableFeaturesCount]:
        if feature.featureCode == _GRID_LICENSE_FEATURE_CODE_VGPU:
            return 1 if feature.featureState > 0 else 0
    return None
