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
LABEL_HOSTNAME_LOWER: Final = "hostname"
HOSTNAME_LABEL_NAMES: Final = (LABEL_HOSTNAME, LABEL_HOSTNAME_LOWER)
"""The host label's names: dcgm-exporter says `Hostname` up to 4.5.x-4.8.2 and `hostname` from
4.6.0-4.8.3 on (its #655). A series carries both by default, so that queries written for either
release keep working (`--hostname-label-name` picks one, `-n` none)."""
LABEL_CONTAINER: Final = "container"
LABEL_NAMESPACE: Final = "namespace"
LABEL_POD: Final = "pod"
LABEL_VGPU: Final = "vgpu"
LABEL_POD_UID: Final = "pod_uid"
LABEL_PID: Final = "pid"
LABEL_PROCESS_NAME: Final = "process_name"
LABEL_PROCESS_TYPE: Final = "process_type"
"""compute, graphics, mps (an MPS client) or mps-server (the MPS server or control daemon)."""
LABEL_USER: Final = "user"
"""The Unix user running a GPU process no pod or container holds (issue 34)."""
POD_LABEL_PREFIX: Final = "pod_label_"
LABEL_HPC_JOB: Final = "hpc_job"
"""An HPC job holding the GPU (`--hpc-job-mapping-dir`): an attribute, as dcgm-exporter's hpc.go."""

# Order: identity, MIG instance (only on instance series), Hostname, label-type fields
# (sorted), then the attribute labels (container, namespace, pod, pod_uid, vgpu and the pod's
# own labels) sorted together by name, as dcgm-exporter's template ranges over its map.
DEVICE_LABELS: Final = (LABEL_GPU, LABEL_UUID, LABEL_PCI_BUS_ID, LABEL_DEVICE, LABEL_MODEL_NAME)
INSTANCE_LABELS: Final = (LABEL_GPU_I_PROFILE, LABEL_GPU_I_ID)
POD_LABELS: Final = (LABEL_CONTAINER, LABEL_NAMESPACE, LABEL_POD)
RESERVED_LABELS: Final = frozenset({
    *DEVICE_LABELS, *INSTANCE_LABELS, *HOSTNAME_LABEL_NAMES, *POD_LABELS, LABEL_VGPU,
    LABEL_POD_UID, LABEL_PID, LABEL_PROCESS_NAME, LABEL_PROCESS_TYPE, LABEL_HPC_JOB,
    # Prometheus's target labels: with honorLabels: true a pod label would replace them, and
    # dashboard 12239 keys on `instance`.
    "job", "instance",
    # A DRA series' claim labels: a pod label of the same name would duplicate one, and a
    # duplicate label name makes Prometheus reject the whole scrape.
    "dra_claim_name", "dra_claim_namespace", "dra_device_name", "dra_driver_name",
    "dra_pool_name", "dra_mig_profile", "dra_mig_device_uuid",
})

SELF_PREFIX: Final = "gpu_enricher_"


class Hostname(str):
    """This node's name, the host label's value, carrying the label's names (both by default,
    or the one `--hostname-label-name` chose), in the order they are printed. Everywhere else
    it is the plain string (the JSON API's `hostname`); a plain `str` host name is labelled
    `Hostname` only."""

    labels: tuple[str, ...]

    def __new__(cls, value: str,
                labels: tuple[str, ...] = HOSTNAME_LABEL_NAMES) -> "Hostname":
        if not labels or len(set(labels)) != len(labels) or not set(labels) <= set(
                HOSTNAME_LABEL_NAMES):
            raise ValueError(f"host label names {labels!r}: one or both of "
                             f"{HOSTNAME_LABEL_NAMES}")
        self = super().__new__(cls, value)
        self.labels = tuple(name for name in HOSTNAME_LABEL_NAMES if name in labels)
        return self


def hostname_pairs(hostname: str) -> list[tuple[str, str]]:
    """The host labels of a series: (name, this node's name) for each of its names."""
    labels = hostname.labels if isinstance(hostname, Hostname) else (LABEL_HOSTNAME,)
    return [(label, str(hostname)) for label in labels]


def device_name(index: int) -> str:
    """dcgm-exporter's `device` label: `nvidia<NVML index>`."""
    return f"nvidia{index}"
