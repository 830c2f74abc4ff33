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

# Order: identity, MIG instance (only on instance series), Hostname, label-type fields
# (sorted), then the pod labels that later stages append.
DEVICE_LABELS: Final = (LABEL_GPU, LABEL_UUID, LABEL_PCI_BUS_ID, LABEL_DEVICE, LABEL_MODEL_NAME)
INSTANCE_LABELS: Final = (LABEL_GPU_I_PROFILE, LABEL_GPU_I_ID)
POD_LABELS: Final = (LABEL_CONTAINER, LABEL_NAMESPACE, LABEL_POD)

SELF_PREFIX: Final = "gpu_enricher_"


def device_name(index: int) -> str:
    """dcgm-exporter's `device` label: `nvidia<NVML index>`."""
    return f"nvidia{index}"
