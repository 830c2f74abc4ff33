"""news.with_gone_gpus: a GPU the driver stops listing is served as down for one pass."""

from gpu_enricher.collector.news import GONE_FROM_DRIVER, with_gone_gpus
from gpu_enricher.model import DeviceIdentity, GpuSnapshot, NodeSnapshot


def gpu(index: int, uuid: str) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(index, uuid, f"00000000:{index}8:00.0", "NVIDIA H100"))


def test_a_gone_gpu_is_kept_down_for_one_pass_only() -> None:
    first = NodeSnapshot((gpu(0, "GPU-a"), gpu(1, "GPU-b")), "580")
    second = with_gone_gpus(first, NodeSnapshot((gpu(0, "GPU-a"),), "580"))
    assert [(g.identity.uuid, g.healthy, g.error) for g in second.gpus] == [
        ("GPU-a", True, None), ("GPU-b", False, GONE_FROM_DRIVER)]
    assert second.driver_version == "580"
    third = with_gone_gpus(second, NodeSnapshot((gpu(0, "GPU-a"),), "580"))
    assert [g.identity.uuid for g in third.gpus] == ["GPU-a"]


def test_renumbered_gpus_keep_the_old_series_down_for_one_pass() -> None:
    # GPU 0 fell off the bus; the driver now lists the old GPU 1 as 0.
    first = NodeSnapshot((gpu(0, "GPU-a"), gpu(1, "GPU-b")))
    renumbered = gpu(0, "GPU-b")
    second = with_gone_gpus(first, NodeSnapshot((renumbered,)))
    assert [(g.identity.index, g.identity.uuid, g.healthy) for g in second.gpus] == [
        (0, "GPU-b", True), (0, "GPU-a", False), (1, "GPU-b", False)]


def test_nothing_gone_is_the_same_snapshot() -> None:
    lost = GpuSnapshot(gpu(1, "GPU-b").identity, healthy=False, error="GPU is lost")
    after = NodeSnapshot((gpu(0, "GPU-a"), lost))
    assert with_gone_gpus(None, after) is after
    assert with_gone_gpus(NodeSnapshot((gpu(0, "GPU-a"), gpu(1, "GPU-b"))), after) is after
