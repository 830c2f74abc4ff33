"""The one place for dcgm-exporter's label names and their order.

Dashboards, alerts and Prometheus Adapter rules match on these names, so they are the
compatibility contract (see dcgm-compat.md, "Exposition").
"""

from typing import Final

LABEL_GPU: Final = "gpu"
LABEL_UUID: Final = "UUID"
LABEL_PCI_BUS_ID: Final = "pci_bus_id"
LABEL_DEVICE: Final = "device"
LABEL_MODEL_NAME: Final = "modelName"
LABEL_GPU_I_PROFILE: Final = "GPU_I_PROFILE"
LABEL_GPU_I_ID: Final = "GPU_I_ID"
LABEL_HOSTNAME: Final = "Hostname"
LABEL_CONTAINER: Final = "container"
LABEL_NAMESPACE: Final = "namespace"
LABEL_POD: Final = "pod"
LABEL_VGPU: Final = "vgpu"
LABEL_POD_UID: Final = "pod_uid"
LABEL_PID: Final = "pid"
LABEL_PROCESS_NAME: Final = "process_name"
POD_LABEL_PREFIX: Final = "pod_label_"

# Order: identity, MIG instance (only on instance series), Hostname, label-type fields
# (sorted), then the attribute labels (container, namespace, pod, pod_uid, vgpu and the pod's
# own labels) sorted together by name, as dcgm-exporter's template ranges over its map.
DEVICE_LABELS: Final = (LABEL_GPU, LABEL_UUID, LABEL_PCI_BUS_ID, LABEL_DEVICE, LABEL_MODEL_NAME)
INSTANCE_LABELS: Final = (LABEL_GPU_I_PROFILE, LABEL_GPU_I_ID)
POD_LABELS: Final = (LABEL_CONTAINER, LABEL_NAMESPACE, LABEL_POD)
RESERVED_LABELS: Final = frozenset({
    *DEVICE_LABELS, *INSTANCE_LABELS, LABEL_HOSTNAME, *POD_LABELS, LABEL_VGPU, LABEL_POD_UID,
    LABEL_PID, LABEL_PROCESS_NAME,
    # Prometheus's target labels: with honorLabels: true a pod label would replace them, and
    # dashboard 12239 keys on `instance`.
    "job", "instance",
    # A DRA series' claim labels: a pod label of the same name would duplicate one, and a
    # duplicate label name makes Prometheus reject the whole scrape.
    "dra_claim_name", "dra_claim_namespace", "dra_device_name", "dra_driver_name",
    "dra_pool_name", "dra_mig_profile", "dra_mig_device_uuid",
})

SELF_PREFIX: Final = "gpu_enricher_"


def device_name(index: int) -> str:
    """dcgm-exporter's `device` label: `nvidia<NVML index>`."""
    return f"nvidia{index}"
