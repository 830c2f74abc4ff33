"""gpu-enricher: a drop-in, Kubernetes-aware replacement for NVIDIA dcgm-exporter."""

__version__ = "0.1.0"
