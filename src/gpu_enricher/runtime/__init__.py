"""Container runtimes on hosts without Kubernetes (`--container-labels`): which running container
was given which GPUs, asked of a Docker-compatible Engine API (Docker, Podman's service) over its
unix socket. `engine.py` parses its answers, `engine_client.py` asks, `source.py` keeps the last
answer for the join (attribution/containers.py).

May import: `model` and `attribution` (what a container was given, the form the join reads).
Imported by: `assembly` only.
"""
