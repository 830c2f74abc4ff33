"""Issue 31: every DCGM 4.6/4.7 name beside its classic one, through real pynvml over the fake
libnvidia-ml. Both names of a field come from one NVML reading of one pass, in the exact
relation of their units; serving both costs no NVML call more; and the exposition carries each
name's help and type as the counters line gives them."""

import asyncio
import re
import time
from collections.abc import Callable

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.collection import default_counters_path
from gpu_enricher.fields.convert import MIB, NVLINK_BYTES_PER_CLASSIC_UNIT
from gpu_enricher.fields.counters import CounterLine, load_counters, parse_counters
from gpu_enricher.fields.namings import BY_CURRENT, RENAMES, Rename, Scale
from gpu_enricher.fields.table import EVENT_FIELDS, IMPLEMENTED
from gpu_enricher.model import FieldValue
from gpu_enricher.nvml.backend import NvmlBackend
from tests.fake_nvml.build import FakeNvml

SLACK = 123_457
"""Bytes beyond whole MiB in every total and used memory of the fake (FAKE_NVML_MEMORY_SLACK)."""

# current value, classic value → the relation DCGM's units put between them.
RELATION: dict[Scale, Callable[[float, float], bool]] = {
    Scale.SAME: lambda new, old: new == old,
    Scale.HERTZ: lambda new, old: new == old * 1_000_000,
    Scale.JOULES: lambda new, old: new == old // 1000,
    Scale.RATIO: lambda new, old: new == old / 100,
    Scale.BYTES: lambda new, old: old * MIB <= new < (old + 1) * MIB,
    Scale.BYTES_PER_SECOND: lambda new, old: (
        old * NVLINK_BYTES_PER_CLASSIC_UNIT <= new < (old + 1) * NVLINK_BYTES_PER_CLASSIC_UNIT),
    Scale.SECONDS: lambda new, old: new == old / 1e9,
}
NEW_FIELDS = [r for r in RENAMES if r.new_field]


@pytest.fixture
def backend(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> NvmlBackend:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    monkeypatch.setenv("FAKE_NVML_GPM", "0")
    monkeypatch.setenv("FAKE_NVML_MIG", "1=1:9,2:19")
    monkeypatch.setenv("FAKE_NVML_MEMORY_SLACK_BYTES", str(SLACK))
    fake.reset()
    opened = NvmlBackend(slow_interval_seconds=0)  # every field read every pass
    opened.open()
    return opened


def test_every_base_unit_field_is_its_classic_reading_in_its_unit(
        backend: NvmlBackend) -> None:
    fields = frozenset(IMPLEMENTED) - EVENT_FIELDS
    try:
        backend.sample(fields)
        time.sleep(0.01)  # NVLink throughput: a rate between two passes
        snap = backend.sample(fields)
    finally:
        backend.close()
    compared = 0
    for gpu in snap.gpus:
        entities = [gpu.values, *(inst.values for inst in gpu.instances)]
        for values in entities:
            for rename in NEW_FIELDS:
                new, old = values.get(rename.current), values.get(rename.classic)
                assert (new is None) == (old is None), (rename.current, values)
                if new is None or old is None:
                    continue
                assert not isinstance(new, str) and not isinstance(old, str)
                assert RELATION[rename.scale](new, old), (rename.current, new, old)
                compared += 1
    by_name = {r.current for r in NEW_FIELDS
               if any(r.current in v for g in snap.gpus for v in (g.values,))}
    # Every base-unit field has a value on the fake (NVLink only on GPU 0, GPM on GPU 0).
    assert by_name == {r.current for r in NEW_FIELDS}, {r.current for r in NEW_FIELDS} - by_name
    assert compared >= len(NEW_FIELDS)
    gpu0 = snap.gpus[0].values
    # Framebuffer bytes are NVML's byte counts, not MiB * 2^20.
    assert gpu0["DCGM_FI_DEV_FB_USED_BYTES"] == 1024 * MIB + SLACK
    assert gpu0["DCGM_FI_DEV_FB_USED"] == 1024
    assert gpu0["DCGM_FI_DEV_FB_CAPACITY_BYTES"] == 85899345920 + SLACK
    # A MIG instance's memory is its own, in bytes too (instance 2 of GPU 1 uses 200 MiB).
    inst = next(i for i in snap.gpus[1].instances if i.gpu_instance_id == 2)
    assert inst.values["DCGM_FI_DEV_FB_USED_BYTES"] == 200 * MIB + SLACK
    # NVLink: the bytes/s and DCGM's "MB/s" of one delta (a steady 3000 KiB per link per ms).
    assert gpu0["DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND"] > 0


def _calls_of_one_pass(backend: NvmlBackend, fake: FakeNvml,
                       fields: frozenset[str]) -> tuple[int, dict[str, FieldValue]]:
    backend.sample(fields)  # the first pass opens GPM samples and NVLink's first reading
    before = fake.total_calls()
    snap = backend.sample(fields)
    return fake.total_calls() - before, dict(snap.gpus[0].values)


def test_both_names_cost_no_second_nvml_call(fake: FakeNvml, backend: NvmlBackend) -> None:
    classic = frozenset(r.classic for r in NEW_FIELDS)
    try:
        alone, _ = _calls_of_one_pass(backend, fake, classic)
    finally:
        backend.close()
    both_backend = NvmlBackend(slow_interval_seconds=0)
    both_backend.open()
    try:
        both, values = _calls_of_one_pass(both_backend, fake,
                                          classic | {r.current for r in NEW_FIELDS})
    finally:
        both_backend.close()
    assert both == alone > 0
    assert {r.current for r in NEW_FIELDS} <= set(values)


def _both_names_csv(renames: list[Rename]) -> str:
    lines = []
    for rename in renames:
        lines.append(f"{rename.classic}, {rename.prom_type}, classic {rename.classic}")
        lines.append(f'{rename.current}, {rename.prom_type}, "{rename.help}"')
    return "\n".join(lines) + "\n"


def _series(text: str) -> dict[str, dict[str, str]]:
    """DCGM family → {labels: value} from text exposition."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("DCGM_"):
            match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
            assert match, line
            found.setdefault(match[1], {})[match[2]] = match[3]
    return found


async def exposition(counters: tuple[CounterLine, ...]) -> str:
    """The text of the second pass of a collector over the fake library (NVLink throughput and
    GPM need a window between two passes), every field read every pass."""
    collector = Collector(NvmlBackend(slow_interval_seconds=0), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=counters))
    await collector.open_backend()
    try:
        await collector.collect_once()
        await asyncio.sleep(0.01)
        await collector.collect_once()
        return collector.exposition.text.decode()
    finally:
        collector.backend.close()


async def test_a_file_listing_both_names_serves_both_families_from_one_reading(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of the table, classic and current name in one counters file: two families
    with the same series, values in the relation of their units, each with the help and type
    its line gives; the label row puts both labels, with one value, on every series."""
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    monkeypatch.setenv("FAKE_NVML_GPM", "0")
    monkeypatch.setenv("FAKE_NVML_MEMORY_SLACK_BYTES", str(SLACK))
    fake.reset()
    renames = [r for r in RENAMES if r.prom_type != "label"]
    csv = _both_names_csv(renames) + (
        "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
        "DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver Version\n")
    text = await exposition(parse_counters(csv, "both.csv"))
    families = _series(text)
    for rename in renames:
        assert f"# HELP {rename.current} {rename.help}\n" in text
        assert f"# TYPE {rename.current} {rename.prom_type}\n" in text
        assert f"# HELP {rename.classic} classic {rename.classic}\n" in text
        old, new = families.get(rename.classic, {}), families.get(rename.current, {})
        assert old.keys() == new.keys(), rename.current
        assert old, f"{rename.classic}: every row has series on the fake's GPU 0"
        for labels, value in new.items():
            assert RELATION[rename.scale](float(value), float(old[labels])), (
                rename.current, value, old[labels])
    # The XID family under both names (counted from events, not read: the same series).
    assert families["DCGM_FI_DEV_XID_ERROR"].keys() == families["DCGM_FI_DEV_XID_ERRORS"].keys()
    for series in (s for family in families.values() for s in family):
        assert 'DCGM_FI_DRIVER_VERSION="580.105.08",' in series
        assert 'DCGM_FI_SYSTEM_DRIVER_VERSION="580.105.08"' in series
    gpu0 = 'gpu="0"'
    used = next(v for k, v in families["DCGM_FI_DEV_FB_USED_BYTES"].items() if gpu0 in k)
    assert used == str(1024 * MIB + SLACK)
    hertz = next(v for k, v in families["DCGM_FI_DEV_SM_CLOCK_HERTZ"].items() if gpu0 in k)
    assert hertz == "1410000000", "an integer of hertz, not 1.41e+09"
    ratio = next(v for k, v in families["DCGM_FI_DEV_GPU_UTIL_RATIO"].items() if gpu0 in k)
    assert ratio == "0.100000", "a double, six decimals as dcgm-exporter's %f"


async def test_the_bundled_4_9_list_is_served_with_its_help_and_type(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "1")
    monkeypatch.setenv("FAKE_NVML_GPM", "0")
    fake.reset()
    lines: tuple[CounterLine, ...] = load_counters(default_counters_path("4.9"))
    text = await exposition(lines)
    families = _series(text)
    for line in lines:
        if line.prom_type == "label":
            assert all(f'{line.field}="580.105.08"' in s for f in families.values() for s in f)
            continue
        assert f"# HELP {line.field} {line.help}\n" in text
        assert f"# TYPE {line.field} {line.prom_type}\n" in text
        assert families.get(line.field), line.field
        rename = BY_CURRENT.get(line.field)
        if rename is not None:
            assert line.prom_type == rename.prom_type and line.help == rename.help
    assert not any(name in families for name in (r.classic for r in RENAMES)), (
        "the 4.9 list serves no classic name")
