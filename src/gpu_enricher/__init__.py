"""gpu-enricher: a drop-in, Kubernetes-aware replacement for NVIDIA dcgm-exporter.

One folder per part of the exporter, the composition (`cli/`, `app`, `assembly`, `reload`) and
the contracts between the parts (`model`, `sources`, `backend`, `config`) at the top; the
package map and the layering rules are in docs/architecture.md, and
tests/test_architecture.py holds them.
"""

__version__ = "0.1.0"
