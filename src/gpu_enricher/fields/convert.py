"""NVML's answers in dcgm-exporter's units and texts: the parse half of every field. Pure."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ..model import FieldValue

MIB: Final = 1 << 20


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
