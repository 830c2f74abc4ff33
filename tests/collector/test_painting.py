"""Pictures painted off the event loop (issue 33): the join and render run on the painter's
thread, the loop's lag through a pass is measured and reported, a loop held is seen."""

import asyncio
import json
import os
import sys
import threading
import time

import pytest

import gpu_enricher.collector.picture as picture
from gpu_enricher.collector.lag import LAG_BUCKETS, LagHistogram, LoopLagProbe
from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.collector.painting import PAINTER_NICE
from gpu_enricher.exposition.query import encode
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.nvml.backend import NvmlBackend
from tests.fake_nvml.build import FakeNvml
from tests.samples import samples, value

CSV = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"


async def test_a_pass_paints_on_the_painter_thread_and_reports_the_loop_lag(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    painted_on: list[str] = []
    paint = picture.Painter.paint

    def recorded(self: picture.Painter, *args: object) -> picture.Picture:
        painted_on.append(threading.current_thread().name)
        return paint(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(picture.Painter, "paint", recorded)
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv")))
    try:
        await collector.open_backend()
        await collector.collect_once()
        await collector.collect_once()
        text = collector.exposition.text.decode()
    finally:
        collector.backend.close()
    loop_thread = threading.current_thread().name
    assert painted_on[0] == loop_thread, "the picture before the loop runs: painted in place"
    assert len(painted_on) >= 3 and set(painted_on[1:]) == {"painter"}
    assert value(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0") is not None
    # The second picture carries the first pass's lag, a histogram of one observation.
    buckets = samples(text, "gpu_enricher_event_loop_lag_seconds_bucket")
    assert [s.labels["le"] for s in buckets] == [*map(str, LAG_BUCKETS), "+Inf"]
    assert value(text, "gpu_enricher_event_loop_lag_seconds_count") == 1
    assert 0 <= value(text, "gpu_enricher_event_loop_lag_seconds_sum") < 1


async def test_the_probe_sees_a_loop_held_and_an_idle_one() -> None:
    probe = LoopLagProbe(asyncio.get_running_loop())
    try:
        probe.start()
        await asyncio.sleep(0.02)
        idle = probe.stop()
        probe.start()
        await asyncio.sleep(0.005)  # the probe is posting
        time.sleep(0.03)  # noqa: ASYNC251 - the loop held by work of ours, on purpose
        await asyncio.sleep(0.005)
        held = probe.stop()
    finally:
        probe.close()
    assert held >= 0.02, held
    assert idle < held


async def test_a_pass_that_ends_while_its_last_post_waits_still_counts_that_wait() -> None:
    probe = LoopLagProbe(asyncio.get_running_loop())
    try:
        probe.start()
        await asyncio.sleep(0.005)
        time.sleep(0.03)  # noqa: ASYNC251 - held to the end: the post lands after stop()
        held = probe.stop()
    finally:
        probe.close()
    assert held >= 0.02, held


def test_the_histogram_counts_cumulatively() -> None:
    histogram = LagHistogram()
    for seconds in (0.0001, 0.0007, 0.003, 2.0):
        histogram.observe(seconds)
    assert histogram.counts[:3] == [1, 2, 2] and histogram.counts[-1] == 3
    assert histogram.observed == 4 and histogram.total == pytest.approx(2.0038)


async def test_the_document_is_encoded_by_the_painter_only_while_it_is_asked_for(
        fake: FakeNvml) -> None:
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv")))
    try:
        await collector.open_backend()
        await collector.collect_once()
        assert collector._document_body is None, "nobody asked: not encoded"
        first = collector.document_body  # the query API asks: encoded at once, here
        assert json.loads(first) == collector.document and first == encode(collector.document)
        await collector.collect_once()
        assert collector._document_body is not None, "asked of the picture before: encoded"
        assert collector._document_body == encode(collector.document)
        await collector.collect_once()
        assert collector._document_body is None, "not asked since: not encoded"
    finally:
        collector.backend.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's niceness: Linux")
async def test_the_painter_thread_yields_the_cpu_to_the_loop(fake: FakeNvml) -> None:
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv")))
    try:
        await collector.open_backend()
        await collector.collect_once()
        painter = collector._painting._worker._thread
        assert painter is not None and painter.name == "painter"
        assert painter.native_id is not None
        # Linux: a thread's id names the thread alone to getpriority.
        assert os.getpriority(os.PRIO_PROCESS, painter.native_id) == PAINTER_NICE
        assert os.getpriority(os.PRIO_PROCESS, 0) == 0, "the loop's own thread keeps its"
    finally:
        collector.backend.close()
