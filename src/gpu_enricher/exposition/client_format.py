"""prometheus_client's families in prometheus_client's own bytes, text 0.0.4 and OpenMetrics
1.0, without its per-character escaping. Pure.

Our own metrics used to go through `generate_latest` of both formats every pass: 37 % of a
pass's painting on the 8 x 7 MIG node (issue 33), most of it in OpenMetrics' name escaping,
which walks every label name character by character even when the name is a plain one. Here a
sample line is made once and serves both formats (they agree on it for legacy names), and only
what prometheus_client would change goes through its own functions: a name outside the legacy
character set, a sample with a timestamp, an exemplar or a native histogram. A test renders the
same families through prometheus_client and through this and compares the bytes.
"""

import re
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import utils
from prometheus_client.exposition import generate_latest as text_exposition
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

# Untyped upstream: prometheus_client's value format (Go's).
go_float: Final[Callable[[float], str]] = utils.floatToGoString

_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""The legacy character set of label names: the one set both formats keep as it is (a metric
name may also hold ':', which OpenMetrics' sample escaping turns into '_')."""
_OM_ONLY_SUFFIXES: Final = ("_created", "_gsum", "_gcount")
"""Samples the text format moves into a gauge family of their own, after the family."""
_TEXT_TYPES: Final = {"counter": "counter", "info": "gauge", "stateset": "gauge",
                      "gaugehistogram": "histogram", "unknown": "untyped"}


class _One(Collector):
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self.metric]


def _plain(metric: Metric) -> bool:
    """Whether our fast path gives exactly prometheus_client's bytes for `metric`."""
    if _LABEL_NAME.fullmatch(metric.name) is None:
        return False
    for sample in metric.samples:
        if (sample.timestamp is not None or sample.exemplar or sample.native_histogram
                or _LABEL_NAME.fullmatch(sample.name) is None):
            return False
        for name in sample.labels:
            if _LABEL_NAME.fullmatch(name) is None:
                return False
    return True


def _line(sample: Sample) -> str:
    if not sample.labels:
        return f"{sample.name} {go_float(sample.value)}\n"
    labels = ",".join(
        f'{name}="{value}"' if ("\\" not in value and "\n" not in value and '"' not in value)
        else '{}="{}"'.format(name, value.replace("\\", r"\\").replace("\n", r"\n")
                              .replace('"', r"\""))
        for name, value in sorted(sample.labels.items()))
    return f"{sample.name}{{{labels}}} {go_float(sample.value)}\n"


def _text_header(name: str, documentation: str, kind: str) -> str:
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def _append(metric: Metric, text: list[str], om: list[str]) -> None:
    lines = [_line(s) for s in metric.samples]
    name = metric.name
    help_om = metric.documentation.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    om.append(f"# HELP {name} {help_om}\n# TYPE {name} {metric.type}\n")
    if metric.unit:
        om.append(f"# UNIT {name} {metric.unit}\n")
    om.extend(lines)
    kind = _TEXT_TYPES.get(metric.type, metric.type)
    text_name = (name + "_total" if metric.type == "counter"
                 else name + "_info" if metric.type == "info" else name)
    text.append(_text_header(text_name, metric.documentation, kind))
    moved: dict[str, list[str]] = {}
    for sample, line in zip(metric.samples, lines, strict=True):
        for suffix in _OM_ONLY_SUFFIXES:
            if sample.name == name + suffix:
                moved.setdefault(suffix, []).append(line)
                break
        else:
            text.append(line)
    for suffix, moved_lines in sorted(moved.items()):
        text.append(_text_header(name + suffix, metric.documentation, "gauge"))
        text.extend(moved_lines)


def _through_prometheus_client(metric: Metric) -> tuple[str, str]:
    one = _One(metric)
    om: Callable[[Collector], bytes] = openmetrics.generate_latest  # untyped upstream
    return text_exposition(one).decode(), om(one).decode().removesuffix("# EOF\n")


def render_client_families(metrics: Iterable[Metric]) -> tuple[bytes, bytes]:
    """(text 0.0.4, OpenMetrics ending in `# EOF`) of `metrics`, byte for byte what
    prometheus_client's two `generate_latest` give for a registry collecting them."""
    text: list[str] = []
    om: list[str] = []
    for metric in metrics:
        if _plain(metric):
            _append(metric, text, om)
        else:  # prometheus_client's own escaping, for the rare family that needs it
            text_family, om_family = _through_prometheus_client(metric)
            text.append(text_family)
            om.append(om_family)
    om.append("# EOF\n")
    return "".join(text).encode(), "".join(om).encode()
