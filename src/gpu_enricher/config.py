"""Frozen, typed settings, built by the CLI from flags and environment variables."""

from dataclasses import dataclass
from pathlib import Path
from typing import Final

BUILTIN_SCENARIO: Final = "builtin"
DEFAULT_KUBELET_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


@dataclass(frozen=True, slots=True)
class Config:
    host: str | None  # None: every interface
    port: int
    collectors: Path
    collect_interval_ms: int
    hostname: str | None  # None with --no-hostname
    log_format: str = "text"
    debug: bool = False
    simulate: str | None = None  # None: real NVML; BUILTIN_SCENARIO or a YAML path
    kubernetes: bool = False  # pod labels from the kubelet's pod-resources API
    kubelet_socket: Path = DEFAULT_KUBELET_SOCKET
    gpu_id_type: str = "uid"  # dcgm-exporter's flag; both ID families are recognised anyway
    extra_resources: frozenset[str] = frozenset()  # --nvidia-resource-names
    virtual_gpus: bool = False

    @property
    def interval_seconds(self) -> float:
        return self.collect_interval_ms / 1000.0
