"""The field table: each field's conversion to dcgm-exporter's unit and its value format."""

import pytest

from gpu_enricher.exposition.render import format_value
from gpu_enricher.fields import convert as conv
from gpu_enricher.fields.catalog import is_known_field
from gpu_enricher.fields.spec import MemoryInfo, ValueFormat
from gpu_enricher.fields.table import IMPLEMENTED, PROFILING_FIELDS

MIB = 1 << 20


@pytest.mark.parametrize(
    ("field", "raw", "exported"),
    [
        ("DCGM_FI_DEV_POWER_USAGE", 16365, "16.365000"),  # mW → W, six decimals
        ("DCGM_FI_DEV_FB_TOTAL", 85899345920, "81920"),  # bytes → MiB
        ("DCGM_FI_DEV_FB_USED", 19762 * MIB + MIB - 1, "19762"),  # MiB rounds down
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 123456789, "123456789"),  # mJ as is
        ("DCGM_FI_DEV_SM_CLOCK", 1410, "1410"),
        ("DCGM_FI_DEV_GPU_TEMP", 30, "30"),
        ("DCGM_FI_DEV_GPU_UTIL", 42, "42"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 6.868, "0.068680"),  # GPM % → DCGM ratio
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 100.0, "1.000000"),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", 100.0, "104857600.000000"),  # MiB/s → bytes/s
    ],
)
def test_conversion_and_format(field: str, raw: float, exported: str) -> None:
    spec = IMPLEMENTED[field]
    value = spec.convert(raw)
    assert format_value(value) == exported
    assert isinstance(value, float) == (spec.fmt is ValueFormat.FLOAT)


def test_text_fields_decode_bytes() -> None:
    assert IMPLEMENTED["DCGM_FI_DRIVER_VERSION"].convert(b"580.105.08") == "580.105.08"
    assert IMPLEMENTED["DCGM_FI_DEV_SERIAL"].convert("1650924000000") == "1650924000000"


def test_table_is_consistent() -> None:
    for name, spec in IMPLEMENTED.items():
        assert spec.name == name and is_known_field(name), name
        assert spec.prom_type in ("gauge", "counter", "label"), name
        assert (spec.fmt is ValueFormat.TEXT) == (spec.prom_type == "label"), name
    assert {n for n in IMPLEMENTED if n.startswith("DCGM_FI_PROF_")} == PROFILING_FIELDS
    fb = [s for s in IMPLEMENTED.values() if isinstance(s.source, MemoryInfo)]
    # Each pick twice: the classic MiB field and DCGM 4.7's bytes (fields/namings.py).
    assert sorted(s.source.pick for s in fb if isinstance(s.source, MemoryInfo)) == [
        "free", "free", "reserved", "reserved", "total", "total", "used", "used"]
    assert {s.name for s in fb if s.convert is conv.as_int} == {
        "DCGM_FI_DEV_FB_CAPACITY_BYTES", "DCGM_FI_DEV_FB_FREE_BYTES",
        "DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_FB_RESERVED_BYTES"}
