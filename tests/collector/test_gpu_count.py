"""A GPU that leaves the node between passes (issue 13, defect 9): its `gpu_enricher_gpu_up`
reads 0 for one pass, then goes; through the real collector and the fake libnvidia-ml."""

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.nvml.backend import NvmlBackend
from tests.fake_nvml.build import FakeNvml
from tests.samples import samples, value

CSV = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
UUID2 = "GPU-fa4e0002-7953-256e-8f33-1343419b1a1c"


async def test_a_gpu_gone_from_the_count_reads_0_for_one_pass_then_goes(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake.reset()
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv")))
    try:
        await collector.open_backend()
        await collector.collect_once()
        text = collector.exposition.text.decode()
        assert value(text, "gpu_enricher_gpu_up", gpu="2", UUID=UUID2) == 1
        monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")  # nvmlDeviceGetCount now answers 2
        fake.reset()
        await collector.collect_once()
        text = collector.exposition.text.decode()
        assert value(text, "gpu_enricher_gpu_up", gpu="2", UUID=UUID2,
                     Hostname="node-a") == 0, "the series says the GPU is down before it goes"
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="2"' not in text
        assert [s.labels["gpu"] for s in samples(text, "gpu_enricher_gpu_up")] == ["0", "1", "2"]
        gone = [r.getMessage() for r in caplog.records if "GPU 2 " in r.getMessage()]
        assert len(gone) == 1 and "stopped answering" in gone[0], gone
        await collector.collect_once()
        text = collector.exposition.text.decode()
        assert [s.labels["gpu"] for s in samples(text, "gpu_enricher_gpu_up")] == ["0", "1"]
        assert value(text, "gpu_enricher_gpu_up", gpu="1") == 1
        assert [r for r in caplog.records if "GPU 2 " in r.getMessage()][1:] == [], \
            "its leaving is logged once"
    finally:
        collector.backend.close()
