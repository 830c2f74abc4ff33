"""The node the query and cycle tests share: four GPUs (one MIG, one free, one lost), three
pods, their processes, and who holds what."""

from gpu_enricher.attribution.devices import Attribution, Holder
from gpu_enricher.model import (
    ContainerRef,
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    HostProcess,
    NodeSnapshot,
    PodAssignment,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
)

UUID0 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"
MIG1 = "MIG-5c89852c-d268-c3f3-8ea0-7d07e1a7cf25"
MIG5 = "MIG-a3c7e1a8-1b1d-5b2e-9c3f-2e6f4b4b8d10"
CID_TRAIN = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"
CID_NOTE = "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830"
CID_INFER = "cb1eadb7abe3a6545e9856411207073277838e1bdc003337c2f8685faeedc32c"
UID_TRAIN = "4a163a05-439d-484b-8e53-2968bc15824f"
UID_NOTE = "dde1244b-5bb5-4297-b544-85f3bc0d80bf"
UID_INFER = "74ba62da-1a3d-11e7-bb11-080027cb0e22"
MIB = 1 << 20

# GPU 0: held by ml/train-0, used by it, by dev/notebook (NVIDIA_VISIBLE_DEVICES=all) and by
# Xorg on the host. GPU 1 in MIG mode: instance 1 held by dev/notebook, instance 5 by
# ml/infer-0 (running on it). GPU 2: free, no process. GPU 3: lost.
NODE = NodeSnapshot((
    GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"),
                values={"DCGM_FI_DEV_FB_TOTAL": 23034, "DCGM_FI_DEV_FB_USED": 1500,
                        "DCGM_FI_DEV_GPU_UTIL": 42},
                processes=(ProcessSample(100, 1024 * MIB, sm_utilization=0.4,
                                         memory_utilization=0.1),
                           ProcessSample(200, 64 * MIB, kind="graphics"),
                           ProcessSample(300, 256 * MIB, sm_utilization=0.02))),
    GpuSnapshot(DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA A100"),
                values={"DCGM_FI_DEV_FB_TOTAL": 81920, "DCGM_FI_DEV_GPU_UTIL": 7},
                mig_enabled=True,
                instances=(GpuInstance(1, 0, "4g.40gb", MIG1,
                                       {"DCGM_FI_DEV_FB_TOTAL": 40192,
                                        "DCGM_FI_DEV_FB_USED": 0}),
                           GpuInstance(5, 0, "1g.10gb", MIG5,
                                       {"DCGM_FI_DEV_FB_TOTAL": 9728,
                                        "DCGM_FI_DEV_FB_USED": 512})),
                processes=(ProcessSample(400, 512 * MIB, gpu_instance_id=5),)),
    GpuSnapshot(DeviceIdentity(2, "GPU-free", "00000000:51:00.0", "NVIDIA L4")),
    GpuSnapshot(DeviceIdentity(3, "GPU-lost", "00000000:61:00.0", "NVIDIA L4"),
                healthy=False, error="GPU is lost"),
))
PODS = PodDirectory((
    PodMeta(UID_TRAIN, "ml", "train-0", containers={CID_TRAIN: "trainer"}, phase="Running"),
    PodMeta(UID_NOTE, "dev", "notebook", containers={CID_NOTE: "jupyter"}, phase="Running"),
    PodMeta(UID_INFER, "ml", "infer-0", containers={CID_INFER: "server"}, phase="Running"),
), synced=True)
TABLE = ProcessTable({
    100: HostProcess(100, 1, "python3", ContainerRef(UID_TRAIN, CID_TRAIN)),
    200: HostProcess(200, 1, "Xorg", None),
    300: HostProcess(300, 1, "jupyter", ContainerRef(UID_NOTE, CID_NOTE)),
    400: HostProcess(400, 1, "tritonserver", ContainerRef(UID_INFER, CID_INFER)),
})
ASSIGNMENTS = (
    PodAssignment("ml", "train-0", "trainer", "nvidia.com/gpu", (UUID0,)),
    PodAssignment("dev", "notebook", "jupyter", "nvidia.com/mig-4g.40gb", (MIG1,)),
    PodAssignment("ml", "infer-0", "server", "nvidia.com/mig-1g.10gb", (MIG5,)),
)
HOLD_TRAIN = Holder("ml", "train-0", "trainer", "nvidia.com/gpu", UUID0)
HOLD_NOTE = Holder("dev", "notebook", "jupyter", "nvidia.com/mig-4g.40gb", MIG1)
HOLD_INFER = Holder("ml", "infer-0", "server", "nvidia.com/mig-1g.10gb", MIG5)
ATTRIBUTION = Attribution({(0, None): (HOLD_TRAIN,), (1, 1): (HOLD_NOTE,),
                           (1, 5): (HOLD_INFER,)})
