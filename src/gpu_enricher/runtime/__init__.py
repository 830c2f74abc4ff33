"""Container runtimes on hosts without Kubernetes (`--container-labels`): which running container
was given which GPUs, asked over the runtime's unix socket of whatever answers there (`probe.py`):
a Docker-compatible Engine API (Docker, Podman's service; `engine.py` parses, `engine_client.py`
asks, `engine_reader.py` reads once per pass) or containerd's gRPC API, every namespace
(`containerd.py` parses, `containerd_client.py` reads on its own thread). `source.py` keeps the
last answer for the join (attribution/containers.py); `reader.py` is what both readers are.

May import: `model`, `worker` (containerd's thread), `attribution` (what a container was given,
the form the join reads) and `rpc` (the gRPC channel, containerd's stubs). Imported by:
`assembly` only.
"""
