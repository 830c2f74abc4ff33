"""`--drop-labels`: which labels may be left off the exported series, and which may not.

A label may be dropped only when it adds no series: its value is a function of labels that stay
(`pci_bus_id`, `device`, `modelName`, `UUID` and the label-type fields of `gpu`; `GPU_I_PROFILE`
of `gpu` and `GPU_I_ID`; the host label of the scrape target; a pod's UID and own labels of
`namespace` and `pod`), so no two series of a scrape can become one. Labels that tell series
apart are refused. Names neither list knows are a pod's own Kubernetes labels
(`--kubernetes-enable-pod-labels`, sanitised as they appear on the series), which are per pod
too. The reasons, and what breaks downstream, are in docs/scale.md. Pure.
"""

import difflib
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from ..fields import names

DROPPABLE: Final[Mapping[str, str]] = MappingProxyType({
    names.LABEL_UUID: "one per GPU (a MIG instance's series carry its parent's)",
    names.LABEL_PCI_BUS_ID: "one per GPU",
    names.LABEL_DEVICE: "nvidia<gpu>, one per GPU",
    names.LABEL_MODEL_NAME: "one per GPU",
    names.LABEL_GPU_I_PROFILE: "one per MIG instance (gpu, GPU_I_ID)",
    names.LABEL_HOSTNAME: "one per node, the scrape target (the other name stays; dropping both "
                          "is -n/--no-hostname)",
    names.LABEL_HOSTNAME_LOWER: "one per node, the scrape target (the other name stays; "
                                "dropping both is -n/--no-hostname)",
    names.LABEL_POD_UID: "one per pod (namespace, pod)",
    names.LABEL_PROCESS_NAME: "one per process (gpu, pid)",
    names.LABEL_PROCESS_TYPE: "one per process (gpu, pid)",
    "dra_claim_namespace": "the pod's namespace (a pod can only use claims of its namespace)",
    "dra_device_name": "one per GPU or MIG instance",
    "dra_driver_name": "one per GPU or MIG instance",
    "dra_pool_name": "one per node",
    "dra_mig_profile": "one per MIG instance, as GPU_I_PROFILE",
    "dra_mig_device_uuid": "one per MIG instance",
})
"""Label name → why it adds no series. Besides these: label-type fields (`DCGM_FI_*`, one value
per GPU) and a pod's own labels."""

_IDENTIFIES: Final = "it tells series apart; without it they would merge into duplicates"
REFUSED: Final[Mapping[str, str]] = MappingProxyType({
    names.LABEL_GPU: f"it identifies the GPU: {_IDENTIFIES}, and dashboard 12239 selects on it",
    names.LABEL_GPU_I_ID: f"it identifies the MIG instance: {_IDENTIFIES}",
    names.LABEL_CONTAINER: "it identifies the container holding the device or running the "
                           f"process: {_IDENTIFIES}",
    names.LABEL_NAMESPACE: f"it identifies the pod with `pod`: {_IDENTIFIES}, and Prometheus "
                           "Adapter rules and our alerts select on it",
    names.LABEL_POD: f"it identifies the pod: {_IDENTIFIES}, and Prometheus Adapter rules and "
                     "our alerts select on it",
    names.LABEL_VGPU: f"it identifies a shared GPU's replica: {_IDENTIFIES}",
    names.LABEL_PID: f"it identifies the process: {_IDENTIFIES}",
    names.LABEL_USER: "it identifies the person a GPU's series are copied for, and whose "
                      f"process it is: {_IDENTIFIES} (without --container-labels there are "
                      "no copies)",
    names.LABEL_HPC_JOB: f"it identifies the HPC job a GPU's series is repeated for: "
                         f"{_IDENTIFIES}",
    "dra_claim_name": f"it identifies the ResourceClaim a device is held through: "
                      f"{_IDENTIFIES} (and our dashboard's claim filter selects on it)",
    "xid": f"it identifies the XID counted: {_IDENTIFIES}",
    "err_code": f"it is the XID of DCGM_FI_DEV_XID_ERRORS: {_IDENTIFIES}",
    "clock_event": f"it identifies the clock-event reason counted: {_IDENTIFIES}",
    "health_watch": f"it identifies the health watch: {_IDENTIFIES}",
    "peer_gpu": f"it identifies the P2P peer: {_IDENTIFIES}",
    "err_msg": "it explains the value of one family (DCGM_FI_DEV_XID_ERRORS), not of every "
               "series: not offered",
    "health_error_code": "it explains the value of one family (DCGM_EXP_GPU_HEALTH_STATUS), not "
                         "of every series: not offered",
    "link_status": "it explains the value of one family (DCGM_EXP_P2P_STATUS), not of every "
                   "series: not offered",
    "window_size_in_ms": "it gives the window of the *_COUNT families, not of every series: not "
                         "offered",
    "job": "Prometheus sets it, not the exporter",
    "instance": "Prometheus sets it, not the exporter (and dashboard 12239 selects on it)",
})
"""Label name → why it cannot be dropped."""

_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FIELD_LABEL: Final = re.compile(r"DCGM_FI_[A-Z0-9_]+")


def refusal(name: str) -> str | None:
    """Why `name` cannot be dropped; None when it can."""
    if name in REFUSED:
        return REFUSED[name]
    if _LABEL_NAME.fullmatch(name) is None:
        return "not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"
    if name.startswith("__"):
        return "names starting with __ are Prometheus's own, never on an exported series"
    return None


def is_known(name: str) -> bool:
    """Whether gpu-enricher sets `name` itself (else it can only be a pod's own label)."""
    return name in DROPPABLE or _FIELD_LABEL.fullmatch(name) is not None


def kept(pairs: Sequence[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """`pairs` without the dropped names (run once per device, holder or process per pass,
    never per scrape: the render stays once per pass)."""
    return [p for p in pairs if p[0] not in drop] if drop else list(pairs)


def unknown_warning(drop: frozenset[str], pod_labels: bool) -> str | None:
    """A warning for names gpu-enricher never sets while no pod's own labels are exported
    (a typo drops nothing, silently otherwise); None when there is nothing to say."""
    unknown = sorted(n for n in drop if not is_known(n))
    if not unknown or pod_labels:
        return None
    hints = [f"{n} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(
        n, [*DROPPABLE, *REFUSED], n=1, cutoff=0.75)) else n for n in unknown]
    return (f"--drop-labels: {', '.join(hints)}: not a label gpu-enricher sets, and without "
            "--kubernetes-enable-pod-labels no pod label is exported either: nothing dropped "
            "for it")
