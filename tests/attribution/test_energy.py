"""One pass's split of a GPU's energy: active by SM share (the MPS server's to its clients by
memory; MIG by compute slices when NVML samples no process), idle by what each pod holds."""

from gpu_enricher.attribution.energy import HOST, IDLE, UNKNOWN, Payer, pass_split
from gpu_enricher.attribution.workloads import MPS_SERVER, GpuProcess, Workload
from gpu_enricher.model import GpuInstance, ProcessSample
from tests.collector.test_energy import PODS, POWER, TABLE, _gpu, _holding, _proc


def test_active_energy_goes_by_sm_share_and_idle_to_the_holders_by_their_share() -> None:
    gpu = _gpu(0, {POWER: 400.0})
    procs = [_proc(gpu, 10, 0, 0.6), _proc(gpu, 11, 1, 0.2), _proc(gpu, 900, None, 0.2)]
    split = pass_split(gpu, procs, TABLE, _holding(0, [0, 2]), baseline_watts=100.0)
    # Active 3/4 by SM share: a 0.45, b (holds nothing, but used it) 0.15, host 0.15;
    # idle 1/4 to the holders of two of four replicas (a, c: 1/16 each), the rest idle.
    expected: dict[Payer, float] = {("ml", "a", "main", None): 0.45 + 1 / 16,
                                    ("ml", "b", "main", None): 0.15, HOST: 0.15,
                                    ("ml", "c", "main", None): 1 / 16, IDLE: 1 / 8}
    assert split.keys() == expected.keys()
    assert all(abs(split[k] - v) < 1e-12 for k, v in expected.items())


def test_the_mps_server_s_sm_share_goes_to_the_clients_by_memory() -> None:
    gpu = _gpu(0, {POWER: 200.0})
    procs = [_proc(gpu, 5, None, 0.8, MPS_SERVER), _proc(gpu, 10, 0, None, "mps", 3 << 30),
             _proc(gpu, 11, 1, None, "mps", 1 << 30), _proc(gpu, 901, None, None, "mps", 0)]
    split = pass_split(gpu, procs, TABLE, {}, baseline_watts=100.0)
    assert abs(split[("ml", "a", "main", None)] - 0.375) < 1e-12
    assert abs(split[("ml", "b", "main", None)] - 0.125) < 1e-12
    assert UNKNOWN not in split and split[IDLE] == 0.5, "no memory: no share"


def test_mig_without_samples_splits_active_energy_by_compute_slices() -> None:
    gpu = _gpu(0, {POWER: 300.0})
    big = GpuInstance(1, 0, "3g.40gb", "MIG-a", slices=3, gpu_slices=7)
    small = GpuInstance(5, 0, "1g.10gb", "MIG-b", slices=1, gpu_slices=7)

    def on(instance: GpuInstance, pid: int, pod: int) -> GpuProcess:
        return GpuProcess((0, instance.gpu_instance_id), gpu, instance,
                          ProcessSample(pid, 0, instance.gpu_instance_id), "python",
                          Workload(*PODS[pod]), True)

    procs = [on(big, 10, 0), on(big, 11, 1), on(small, 12, 2)]
    holder = _holding(0, [0])[(0, None)][0][0]
    split = pass_split(gpu, procs, TABLE, {(0, 1): [(holder, 3 / 7)]}, baseline_watts=100.0)
    # Active 2/3: a and b 3/7 over 2 each, c 1/7, normalised over 4/7 used; idle 1/3: a holds
    # the 3g.40gb instance (3/7), the rest of the GPU is nobody's.
    expected: dict[Payer, float] = {("ml", "a", "main", 1): 2 / 3 * 3 / 8 + 1 / 3 * 3 / 7,
                                    ("ml", "b", "main", 1): 2 / 3 * 3 / 8,
                                    ("ml", "c", "main", 5): 2 / 3 * 1 / 4,
                                    IDLE: 1 / 3 * 4 / 7}
    assert split.keys() == expected.keys()
    assert all(abs(split[k] - v) < 1e-12 for k, v in expected.items())
    assert abs(sum(split.values()) - 1) < 1e-12


def test_mig_with_gpm_per_instance_weighs_the_slices_by_each_instance_s_activity() -> None:
    """GPM measures each GPU instance (on its own SMs): a 3g.40gb instance 20 % busy and a
    1g.10gb one 90 % busy do 0.6/7 and 0.9/7 of the GPU's work. Without a reading for every
    instance in use, compute slices alone (the test above)."""
    gpu = _gpu(0, {POWER: 300.0})
    big = GpuInstance(1, 0, "3g.40gb", "MIG-a", slices=3, gpu_slices=7,
                      values={"DCGM_FI_PROF_SM_ACTIVE": 0.2})
    small = GpuInstance(5, 0, "1g.10gb", "MIG-b", slices=1, gpu_slices=7,
                        values={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.9})

    def on(instance: GpuInstance, pid: int, pod: int) -> GpuProcess:
        return GpuProcess((0, instance.gpu_instance_id), gpu, instance,
                          ProcessSample(pid, 0, instance.gpu_instance_id), "python",
                          Workload(*PODS[pod]), True)

    split = pass_split(gpu, [on(big, 10, 0), on(small, 12, 2)], TABLE, {},
                       baseline_watts=100.0)
    # Active 2/3 split 0.6 : 0.9; idle 1/3 nobody's.
    assert abs(split[("ml", "a", "main", 1)] - 2 / 3 * 0.6 / 1.5) < 1e-12
    assert abs(split[("ml", "c", "main", 5)] - 2 / 3 * 0.9 / 1.5) < 1e-12
    unmeasured = GpuInstance(5, 0, "1g.10gb", "MIG-b", slices=1, gpu_slices=7)
    split = pass_split(gpu, [on(big, 10, 0), on(unmeasured, 12, 2)], TABLE, {},
                       baseline_watts=100.0)
    assert abs(split[("ml", "a", "main", 1)] - 2 / 3 * 3 / 4) < 1e-12, "slices: 3 to 1"
    idle_instances = GpuInstance(1, 0, "3g.40gb", "MIG-a", slices=3, gpu_slices=7,
                                 values={"DCGM_FI_PROF_SM_ACTIVE": 0.0})
    split = pass_split(gpu, [on(idle_instances, 10, 0)], TABLE, {}, baseline_watts=100.0)
    assert split == {IDLE: 1.0}, "measured idle: the power above the baseline is the GPU's own"


def test_outside_pods_a_container_or_person_pays_for_what_it_used_and_what_it_occupies() -> None:
    """A host without Kubernetes (issue 34): the process of a container, or of a person, pays
    as them; the idle part goes to the GPU's occupants by their share."""
    gpu = _gpu(0, {POWER: 400.0})
    procs = [_proc(gpu, 900, None, 0.6), _proc(gpu, 901, None, 0.2)]
    outside = {900: ("container", "notebook"), 901: ("user", "alice")}
    occupied = {(0, None): [(("container", "notebook"), 0.5), (("user", "alice"), 0.5)]}
    split = pass_split(gpu, procs, TABLE, {}, 100.0, outside, occupied)
    # Active 3/4 by SM share (0.6 : 0.2); idle 1/4 split evenly between the two occupants.
    expected: dict[Payer, float] = {("container", "notebook", None): 0.75 * 0.75 + 0.125,
                                    ("user", "alice", None): 0.75 * 0.25 + 0.125}
    assert split.keys() == expected.keys(), "nothing left to `host` or `idle`"
    assert all(abs(split[k] - v) < 1e-12 for k, v in expected.items())
    assert abs(sum(split.values()) - 1.0) < 1e-12
