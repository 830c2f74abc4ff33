"""Our renderer of prometheus_client's families gives prometheus_client's own bytes, both
formats, for every kind of family it may meet (issue 33: the own metrics left its renderer)."""

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest as text_exposition
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.openmetrics.exposition import generate_latest as om_exposition
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Exemplar

from gpu_enricher.exposition.client_format import render_client_families
from gpu_enricher.exposition.ownmetrics import OwnMetrics


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self.metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def _client_bytes(metrics: Iterable[Metric]) -> tuple[bytes, bytes]:
    fixed = _Fixed(metrics)
    return text_exposition(fixed), om_exposition(fixed)


def _every_kind() -> list[Metric]:
    gauge = GaugeMetricFamily("gpu_enricher_g", 'help with "quotes", \\ and\nnewline',
                              labels=["source", "reason"])
    gauge.add_metric(["kubelet", 'a "b" \\ c\nd'], 1.5)
    gauge.add_metric(["api", "ünïcode ✓"], float("nan"))
    gauge.add_metric(["nvml", ""], float("inf"))
    gauge.add_metric(["x", "y"], -0.0)
    counter = CounterMetricFamily("gpu_enricher_c", "a counter", labels=["z", "a"],
                                  created=12.5)
    counter.add_metric(["1", "2"], 1e21)
    counter.add_metric(["3", "4"], 123456789.0)
    plain_counter = CounterMetricFamily("gpu_enricher_plain", "no labels", value=7)
    histogram = HistogramMetricFamily(
        "gpu_enricher_event_loop_lag_seconds", "a histogram", labels=["k"])
    histogram.add_metric(["v"], buckets=[("0.001", 3), ("0.01", 5), ("+Inf", 6)],
                         sum_value=0.25)
    gauge_histogram = GaugeHistogramMetricFamily(
        "gpu_enricher_gh", "a gauge histogram", buckets=[("1.0", 2), ("+Inf", 4)],
        gsum_value=3.0)
    summary = SummaryMetricFamily("gpu_enricher_s", "a summary", count_value=4,
                                  sum_value=2.0)
    info = InfoMetricFamily("gpu_enricher_build", "an info", value={"version": "1.2"})
    stateset = StateSetMetricFamily("gpu_enricher_state", "a stateset",
                                    value={"a": True, "b": False})
    unit = GaugeMetricFamily("gpu_enricher_bytes", "with a unit", value=3, unit="bytes")
    unknown = Metric("gpu_enricher_u", "unknown", "unknown")
    unknown.add_sample("gpu_enricher_u", {}, 2)
    empty = GaugeMetricFamily("gpu_enricher_empty", "no samples", labels=["a"])
    # What the fast path hands back to prometheus_client: odd names, timestamps, exemplars.
    odd_label = Metric("gpu_enricher_odd", "odd label name", "gauge")
    odd_label.add_sample("gpu_enricher_odd", {"a:b": "1", "9x": "2"}, 1)
    colon = Metric("gpu_enricher:colon", "a recording-rule style name", "gauge")
    colon.add_sample("gpu_enricher:colon", {}, 1)
    stamped = Metric("gpu_enricher_stamped", "a timestamp", "gauge")
    stamped.add_sample("gpu_enricher_stamped", {}, 1, timestamp=1700000000.5)
    exemplar = Metric("gpu_enricher_ex", "an exemplar", "counter")
    exemplar.add_sample("gpu_enricher_ex_total", {}, 1, exemplar=Exemplar({"trace": "t"}, 1.0))
    return [gauge, counter, plain_counter, histogram, gauge_histogram, summary, info,
            stateset, unit, unknown, empty, odd_label, colon, stamped, exemplar]


def test_every_kind_of_family_renders_as_prometheus_client_renders_it() -> None:
    metrics = _every_kind()
    assert render_client_families(metrics) == _client_bytes(metrics)


def test_our_whole_own_exposition_renders_as_prometheus_client_renders_it() -> None:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(_Fixed(_every_kind()))
    collected = list(registry.collect())
    text, om = render_client_families(collected)
    assert (text, om) == _client_bytes(collected)
    assert b"process_resident_memory_bytes " in text and om.endswith(b"# EOF\n")
    # And what OwnMetrics hands the exposition carries the standard families.
    own_text, own_om = OwnMetrics().render([])
    assert b"python_gc_objects_collected_total{generation=\"0\"}" in own_text
    assert own_om.endswith(b"# EOF\n")


_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_:]{0,12}", fullmatch=True)
_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=-(2**53), max_value=2**53))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    _names, st.sampled_from(["gauge", "counter", "unknown", "summary", "histogram"]),
    st.text(max_size=20),
    st.lists(st.tuples(st.dictionaries(_names, st.text(max_size=12), max_size=3), _values),
             max_size=4)), max_size=5))
def test_any_family_renders_as_prometheus_client_renders_it(
        families: list[tuple[str, str, str, list[tuple[dict[str, str], float]]]]) -> None:
    metrics = []
    for name, kind, help_text, samples in families:
        metric = Metric(name, help_text, kind)
        for labels, value in samples:
            metric.add_sample(name + "_total" if kind == "counter" else name, labels, value)
        metrics.append(metric)
    assert render_client_families(metrics) == _client_bytes(metrics)
