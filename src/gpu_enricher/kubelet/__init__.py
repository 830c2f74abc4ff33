"""The kubelet's pod-resources API: which pod and container holds each GPU, MIG instance,
time-sliced replica and DRA claim, asked once per pass (`source.py`) over the kubelet's unix
socket by our own gRPC-over-HTTP/2 client (`client.py`, on `rpc`'s channel), on a thread that
gives the GIL back often; its answers are parsed apart from the I/O (`answers.py`), keeping
only the device IDs that name this node's GPUs (`selection.py`).

May import: `model`, `worker`, `fields`, `attribution` (device-ID forms), `exposition` (its
own metric families) and `rpc` (the channel, the stubs). Imported by: `assembly` only.
"""
