"""The kubelet's pod-resources API: which pod and container holds each GPU, MIG instance,
time-sliced replica and DRA claim, asked once per pass (`source.py`) over the kubelet's unix
socket by our own gRPC-over-HTTP/2 client, no gRPC C core (`client.py`, `wire.py`,
`frames.py`; `statuses.py` names its failures as gRPC does), on a thread that gives the GIL
back often (`gil.py`); its answers are parsed apart from the I/O (`answers.py`), keeping
only the device IDs that name this node's GPUs (`selection.py`).

May import: `model`, `worker`, `fields`, `attribution` (device-ID forms) and `exposition` (its
own metric families). Imported by: `assembly` only; `sim.fake_kubelet` uses the stubs.

`_generated/` holds the Python stubs made by `protogen` from `protos/podresources/`; regenerate
them with `tox -e protos` (or `python -m gpu_enricher.kubelet.protogen`), never by hand.
"""
