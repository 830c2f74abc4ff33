"""Join + renderer: golden output in dcgm-exporter's exact format, and both formats parse."""

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from gpu_enricher.attribution.devices import Attribution, attribute
from gpu_enricher.exposition.join import dcgm_families
from gpu_enricher.exposition.ownmetrics import OwnMetrics
from gpu_enricher.exposition.render import (
    Exposition,
    Family,
    Sample,
    SampleLines,
    escape_label_value,
    format_value,
    label_pairs,
    render_openmetrics,
    render_text,
)
from gpu_enricher.exposition.selfmetrics import allocation_family, self_families
from gpu_enricher.fields.counters import parse_counters, plan_counters
from gpu_enricher.fields.names import Hostname
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import (
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    PodAssignment,
    SourceHealth,
)

CSV = """
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""
UUID0 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"


def snapshot() -> NodeSnapshot:
    driver = {"DCGM_FI_DRIVER_VERSION": "580.105.08"}
    return NodeSnapshot(
        gpus=(
            GpuSnapshot(
                DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"),
                values={**driver, "DCGM_FI_DEV_GPU_TEMP": 30, "DCGM_FI_DEV_POWER_USAGE": 16.365,
                        "DCGM_FI_DEV_GPU_UTIL": 42, "DCGM_FI_DEV_FB_USED": 19762,
                        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789},
            ),
            GpuSnapshot(
                DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA A100 80GB PCIe"),
                values={**driver, "DCGM_FI_DEV_GPU_TEMP": 31, "DCGM_FI_DEV_POWER_USAGE": 70.0,
                        "DCGM_FI_DEV_GPU_UTIL": 7},
                mig_enabled=True,
                instances=(
                    GpuInstance(1, 0, "4g.40gb", "MIG-aaa", {"DCGM_FI_DEV_FB_USED": 100}),
                    GpuInstance(9, 0, "1g.10gb", "MIG-bbb", {"DCGM_FI_DEV_FB_USED": 0}),
                ),
            ),
            GpuSnapshot(DeviceIdentity(2, "GPU-lost", "00000000:51:00.0", "NVIDIA L4"),
                        healthy=False, error="GPU is lost"),
        ),
        driver_version="580.105.08",
    )


def families() -> list[Family]:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    return dcgm_families(snapshot(), plan, "node-a")


ID0 = (f'gpu="0",UUID="{UUID0}",pci_bus_id="00000000:31:00.0",device="nvidia0",'
       'modelName="NVIDIA L4",Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.105.08"')
ID1 = (f'gpu="1",UUID="{UUID1}",pci_bus_id="00000000:41:00.0",device="nvidia1",'
       'modelName="NVIDIA A100 80GB PCIe",GPU_I_PROFILE="{p}",GPU_I_ID="{i}",Hostname="node-a",'
       'DCGM_FI_DRIVER_VERSION="580.105.08"')
MIG1 = ID1.format(p="4g.40gb", i="1")
MIG9 = ID1.format(p="1g.10gb", i="9")

GOLDEN = f"""# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{{ID0}}} 30
DCGM_FI_DEV_GPU_TEMP{{{MIG1}}} 31
DCGM_FI_DEV_GPU_TEMP{{{MIG9}}} 31
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{{ID0}}} 16.365000
DCGM_FI_DEV_POWER_USAGE{{{MIG1}}} 70.000000
DCGM_FI_DEV_POWER_USAGE{{{MIG9}}} 70.000000
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{ID0}}} 42
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{{ID0}}} 19762
DCGM_FI_DEV_FB_USED{{{MIG1}}} 100
DCGM_FI_DEV_FB_USED{{{MIG9}}} 0
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{ID0}}} 123456789
"""


def test_golden_text_exposition_in_dcgm_format() -> None:
    assert Exposition.from_families(families()).text.decode() == GOLDEN


def test_openmetrics_keeps_dcgm_names_and_types_counters_unknown() -> None:
    om = Exposition.from_families(families()).openmetrics.decode()
    assert om.endswith("# EOF\n")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n" in om
    assert f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{ID0}}} 123456789\n" in om
    parsed = {f.name: f for f in parse_om(om)}
    assert parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert parsed["DCGM_FI_DEV_POWER_USAGE"].samples[0].value == 16.365


def test_text_parses_with_prometheus_client_and_labels_keep_order() -> None:
    parsed = {f.name: f for f in parse_text(GOLDEN)}
    util = parsed["DCGM_FI_DEV_GPU_UTIL"].samples
    assert len(util) == 1, "GPU_UTIL is not available per MIG instance"
    fb = parsed["DCGM_FI_DEV_FB_USED"].samples
    assert [s.labels.get("GPU_I_ID") for s in fb] == [None, "1", "9"]
    assert all(s.labels["gpu"] != "2" for f in parsed.values() for s in f.samples), \
        "a lost GPU has no DCGM series"


def test_no_hostname_drops_the_label() -> None:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    text = Exposition.from_families(dcgm_families(snapshot(), plan, None)).text.decode()
    assert "Hostname" not in text
    assert 'modelName="NVIDIA L4",DCGM_FI_DRIVER_VERSION="580.105.08"}' in text


def test_value_formats() -> None:
    assert format_value(19762) == "19762"
    assert format_value(16.365) == "16.365000"
    assert format_value(0.06868) == "0.068680"
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("inf")) == "+Inf"


def test_label_values_are_escaped() -> None:
    assert label_pairs([("modelName", 'a "quoted"\\name\nx')]) == \
        'modelName="a \\"quoted\\"\\\\name\\nx"'


def test_self_metrics_report_lost_gpu_and_counters_in_both_formats() -> None:
    health = {"nvml": SourceHealth(up=True, collections=3, errors={"GpuIsLost": 3},
                                   last_duration_seconds=0.0021, last_success_timestamp=1.5)}
    own = OwnMetrics().render(self_families(snapshot(), health, "node-a", "nvml"))
    expo = Exposition.from_families(families(), own)
    text = expo.text.decode()
    assert text.startswith(GOLDEN), "the DCGM part first, in our own format"
    assert ('gpu_enricher_gpu_up{Hostname="node-a",UUID="GPU-lost",device="nvidia2",gpu="2",'
            'modelName="NVIDIA L4",pci_bus_id="00000000:51:00.0"} 0.0') in text
    assert f'gpu_enricher_gpu_up{{Hostname="node-a",UUID="{UUID0}"' in text
    assert "# TYPE gpu_enricher_collections_total counter\n" in text
    assert 'gpu_enricher_collection_errors_total{reason="GpuIsLost",source="nvml"} 3.0' in text
    om_text = expo.openmetrics.decode()
    assert om_text.count("# EOF") == 1 and om_text.endswith("# EOF\n")
    om = {f.name: f for f in parse_om(om_text)}
    assert om["gpu_enricher_collections"].type == "counter"
    assert om["gpu_enricher_collections"].samples[0].value == 3
    assert om["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    text_parsed = {f.name: f for f in parse_text(text)}
    assert text_parsed["gpu_enricher_gpu_up"].type == "gauge"
    assert text_parsed["DCGM_FI_DEV_GPU_TEMP"].type == "gauge"


def test_standard_process_and_python_families_in_both_formats() -> None:
    text, om_text = OwnMetrics().render([])
    for parsed in ({f.name: f for f in parse_text(text.decode())},
                   {f.name: f for f in parse_om(om_text.decode())}):
        assert parsed["process_resident_memory_bytes"].samples[0].value > 1 << 20
        assert parsed["process_cpu_seconds"].type == "counter"
        assert parsed["process_cpu_seconds"].samples[0].value > 0
        assert parsed["process_open_fds"].samples[0].value >= 3
        assert parsed["process_start_time_seconds"].samples[0].value > 1.6e9
        assert parsed["python_info"].samples[0].labels["implementation"] == "CPython"
        assert {s.labels["generation"] for s in parsed["python_gc_collections"].samples} == {
            "0", "1", "2"}
    assert b"_created" not in text and b"_created" not in om_text


def test_empty_self_families_are_absent_not_bare_headers() -> None:
    no_errors = {"nvml": SourceHealth(up=True)}
    text, _ = OwnMetrics().render(self_families(None, no_errors, None, "nvml"))
    assert b"gpu_enricher_source_up" in text
    assert b"gpu_enricher_collection_errors" not in text
    assert b"gpu_enricher_gpu_up" not in text


def test_gzip_bodies_are_cached_and_decompress_to_the_plain_body() -> None:
    expo = Exposition.from_families(families())
    gz = expo.body(openmetrics=False, gzipped=True)
    assert gzip.decompress(gz) == expo.text
    assert expo.body(openmetrics=False, gzipped=True) is gz
    assert gzip.decompress(expo.body(openmetrics=True, gzipped=True)) == expo.openmetrics


def test_a_family_kept_from_the_picture_before_renders_the_same_bytes() -> None:
    """Issue 33: sample lines of an unchanged family are reused, a changed one is rendered;
    either way the bodies are those of rendering every family afresh."""
    lines = SampleLines()
    first = families()
    changed = [first[0], Family(first[1].name, first[1].prom_type, first[1].help,
                                first[1].samples[:1]), *first[2:]]
    for picture in (first, first, changed, changed[1:], first):
        kept = Exposition.from_families(picture, (b"own\n", b"own\n# EOF\n"), lines)
        fresh = Exposition.from_families(picture, (b"own\n", b"own\n# EOF\n"))
        assert kept.text == fresh.text == render_text(picture) + b"own\n"
        assert kept.openmetrics == fresh.openmetrics == (
            render_openmetrics(picture, eof=False) + b"own\n# EOF\n")


def test_gzip_variants_asked_of_one_picture_are_compressed_with_the_next() -> None:
    before = Exposition.from_families(families())
    before.body(openmetrics=True, gzipped=True)
    before.body(openmetrics=False, gzipped=False)
    assert before.asked == {(True, True), (False, False)}
    after = Exposition.from_families(families())
    after.compress(before.asked)
    assert set(after._gzipped) == {True}, "only the gzip variant asked for, made in advance"
    assert gzip.decompress(after.body(openmetrics=True, gzipped=True)) == after.openmetrics


def test_empty_family_prints_nothing() -> None:
    assert Exposition.from_families([Family("x", "gauge", "h", ())]).text == b""
    assert Exposition.from_families([Family("x", "gauge", "h", (Sample("", "1"),))]).text == \
        b"# HELP x h\n# TYPE x gauge\nx 1\n"


def attribution_fixture() -> Attribution:
    return attribute(snapshot().gpus, [
        PodAssignment("ml", "trainer-0", "cuda", "nvidia.com/gpu", (UUID0,)),
        PodAssignment("web", "infer-b", "srv", "nvidia.com/mig-1g.10gb", ("MIG-bbb::1",)),
        PodAssignment("web", "infer-a", "srv", "nvidia.com/mig-1g.10gb", ("MIG-bbb::0",)),
    ])


def test_pod_labels_only_on_held_devices_in_dcgm_order() -> None:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    fams = dcgm_families(snapshot(), plan, "node-a", attribution_fixture())
    text = Exposition.from_families(fams).text.decode()
    assert (f'DCGM_FI_DEV_FB_USED{{{ID0},container="cuda",namespace="ml",pod="trainer-0"}} 19762\n'
            in text)
    assert f"DCGM_FI_DEV_FB_USED{{{MIG1}}} 100\n" in text, "a free instance has no pod labels"
    # A shared device carries its first holder in sorted order, never flipping.
    assert f'DCGM_FI_DEV_FB_USED{{{MIG9},container="srv",namespace="web",pod="infer-a"}} 0\n' \
        in text
    assert "infer-b" not in text


def test_virtual_gpus_repeat_series_per_holder() -> None:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    fams = dcgm_families(snapshot(), plan, "node-a", attribution_fixture(), virtual_gpus=True)
    text = Exposition.from_families(fams).text.decode()
    for pod, replica in (("infer-a", "0"), ("infer-b", "1")):
        assert (f'DCGM_FI_DEV_GPU_TEMP{{{MIG9},container="srv",namespace="web",pod="{pod}",'
                f'vgpu="{replica}"}} 31\n') in text
    assert f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="cuda",namespace="ml",pod="trainer-0"}} 30\n' \
        in text, "an exclusively held GPU has no vgpu label"
    assert parse_text(text), "still a valid exposition"


def test_allocation_info_lists_every_holder() -> None:
    family = allocation_family(snapshot(), attribution_fixture())
    text, _ = OwnMetrics().render([family])
    lines = text.decode().split("# HELP process_")[0].splitlines()[2:]
    assert lines == [
        f'gpu_enricher_device_allocation_info{{UUID="{UUID0}",container="cuda",'
        f'device_id="{UUID0}",gpu="0",namespace="ml",pod="trainer-0",resource="nvidia.com/gpu"}}'
        ' 1.0',
        f'gpu_enricher_device_allocation_info{{GPU_I_ID="9",UUID="{UUID1}",container="srv",'
        'device_id="MIG-bbb::0",gpu="1",namespace="web",pod="infer-a",'
        'resource="nvidia.com/mig-1g.10gb"} 1.0',
        f'gpu_enricher_device_allocation_info{{GPU_I_ID="9",UUID="{UUID1}",container="srv",'
        'device_id="MIG-bbb::1",gpu="1",namespace="web",pod="infer-b",'
        'resource="nvidia.com/mig-1g.10gb"} 1.0',
    ]


LEGACY_CSV = """
dcgm_gpu_temp, gauge, GPU temperature (in C).
dcgm_power_usage, gauge, Power draw (in W).
dcgm_fb_used, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""


def test_legacy_names_export_under_their_own_name_with_the_fields_values() -> None:
    plan, warnings = plan_counters(parse_counters(LEGACY_CSV, "1.x.csv"),
                                   frozenset(IMPLEMENTED), "test")
    assert warnings == ()
    text = Exposition.from_families(dcgm_families(snapshot(), plan, "node-a")).text.decode()
    assert f"# TYPE dcgm_gpu_temp gauge\ndcgm_gpu_temp{{{ID0}}} 30\n" in text
    assert f"dcgm_power_usage{{{ID0}}} 16.365000\ndcgm_power_usage{{{MIG1}}} 70.000000\n" in text
    assert f"dcgm_fb_used{{{MIG1}}} 100\n" in text, "MIG instance values, as the field's"
    assert f"DCGM_FI_DEV_GPU_TEMP{{{ID0}}} 30\n" in text, "both names, one reading"
    parsed = {f.name: f for f in parse_om(
        Exposition.from_families(dcgm_families(snapshot(), plan, "node-a")).openmetrics.decode())}
    assert parsed["dcgm_power_usage"].samples[0].value == 16.365


def test_hostname_label_names_are_chosen_in_place_everywhere() -> None:
    """Both host labels (the default, issue 31) in the one label's place, Hostname first; or
    the one chosen. The rest of the text is byte for byte the same."""
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    lower = Hostname("node-a", ("hostname",))
    text = Exposition.from_families(dcgm_families(snapshot(), plan, lower)).text.decode()
    assert GOLDEN.replace('Hostname="node-a"', 'hostname="node-a"') == text
    assert "Hostname" not in text
    assert Exposition.from_families(
        dcgm_families(snapshot(), plan, Hostname("node-a", ("Hostname",)))).text.decode() == GOLDEN
    both = Exposition.from_families(dcgm_families(snapshot(), plan, Hostname("node-a")))
    assert both.text.decode() == GOLDEN.replace('Hostname="node-a"',
                                                'Hostname="node-a",hostname="node-a"')
    own = {f.name: f for f in self_families(snapshot(), {}, lower, "test")}
    assert all(s.labels["hostname"] == "node-a" and "Hostname" not in s.labels
               for s in own["gpu_enricher_gpu_up"].samples)
    own = {f.name: f for f in self_families(snapshot(), {}, Hostname("node-a"), "test")}
    assert all(s.labels["hostname"] == s.labels["Hostname"] == "node-a"
               for s in own["gpu_enricher_gpu_up"].samples)
    with pytest.raises(ValueError, match="one or both of"):
        Hostname("node-a", ("HOSTNAME",))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True),
                          st.text(alphabet=st.sampled_from('ab"\\\n é{},='), max_size=8)),
                max_size=6))
def test_label_pairs_escape_every_value_that_needs_it(pairs: list[tuple[str, str]]) -> None:
    """The one-join fast path (issue 33) gives what escaping each value gives."""
    expected = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in pairs)
    assert label_pairs(pairs) == label_pairs(iter(pairs)) == expected
