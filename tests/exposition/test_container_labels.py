"""`--container-labels` in the DCGM families, as golden text: dcgm-exporter 4.8.3's
`container_test.go` restated on our join (each series kept as it is, one copy per container
after it; an instance's containers; `hpc_job` copies copied again; a series whose pod names its
container left alone), and what `--drop-labels container` makes of it."""

from gpu_enricher.attribution.devices import EMPTY_ATTRIBUTION
from gpu_enricher.exposition.join import NO_PODS, PodContext, dcgm_families
from gpu_enricher.exposition.render import Exposition
from gpu_enricher.fields.counters import parse_counters, plan_counters
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import NO_JOBS, JobMapping
from tests.exposition.test_render import ID0, MIG1, MIG9, attribution_fixture, snapshot

CSV = ("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
       "DCGM_FI_DRIVER_VERSION, label, Driver Version\n")
HEAD = "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"


def text(containers: dict[tuple[int, int | None], tuple[str, ...]], *,
         jobs: JobMapping = NO_JOBS, held: bool = False, pods: PodContext = NO_PODS,
         users: tuple[str, ...] = ()) -> str:
    """The family with the containers of each device (and `users` on GPU 0, after them)."""
    occupied = {key: tuple(("container", n) for n in names) for key, names in containers.items()}
    if users:
        occupied[(0, None)] = (*occupied.get((0, None), ()), *(("user", u) for u in users))
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    families = dcgm_families(snapshot(), plan, "node-a",
                             attribution_fixture() if held else EMPTY_ATTRIBUTION,
                             pods=pods, jobs=jobs, occupants=occupied)
    return Exposition.from_families(families).text.decode()


def test_each_series_then_one_copy_per_container() -> None:
    assert text({(0, None): ("trainer-a", "trainer-b"), (1, 9): ("mig-container",)}) == (
        HEAD +
        f"DCGM_FI_DEV_GPU_TEMP{{{ID0}}} 30\n"
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="trainer-a"}} 30\n'
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="trainer-b"}} 30\n'
        f"DCGM_FI_DEV_GPU_TEMP{{{MIG1}}} 31\n"
        f"DCGM_FI_DEV_GPU_TEMP{{{MIG9}}} 31\n"
        f'DCGM_FI_DEV_GPU_TEMP{{{MIG9},container="mig-container"}} 31\n')


def test_hpc_job_copies_are_copied_per_container_sorted_in() -> None:
    got = text({(0, None): ("trainer",)}, jobs=JobMapping({(0, None): ("job-1", "job-2")}))
    assert got.splitlines()[2:6] == [
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},hpc_job="job-1"}} 30',
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="trainer",hpc_job="job-1"}} 30',
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},hpc_job="job-2"}} 30',
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="trainer",hpc_job="job-2"}} 30']


def test_a_pod_s_container_wins() -> None:
    """-k: GPU 0 and instance 9 are held by pods (their series name the pod's container and
    are left alone); instance 1 is free, so it is copied."""
    got = text({(0, None): ("should-not-overwrite",), (1, 1): ("free-instance",),
                (1, 9): ("should-not-overwrite",)}, held=True)
    assert "should-not-overwrite" not in got
    assert got.count("free-instance") == 1
    assert f'DCGM_FI_DEV_GPU_TEMP{{{MIG1},container="free-instance"}} 31\n' in got


def test_without_containers_nothing_changes_and_dropping_the_label_drops_the_copies() -> None:
    plain = text({})
    assert text({(5, None): ("elsewhere",)}) == plain
    assert text({(0, None): ("trainer",)},
                pods=PodContext(drop=frozenset({"container"}))) == plain


def test_people_using_a_gpu_get_copies_after_its_containers() -> None:
    got = text({(0, None): ("trainer",)}, users=("alice",))
    assert got.splitlines()[2:5] == [
        f"DCGM_FI_DEV_GPU_TEMP{{{ID0}}} 30",
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="trainer"}} 30',
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},user="alice"}} 30']
