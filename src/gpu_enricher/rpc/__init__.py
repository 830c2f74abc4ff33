"""gRPC over HTTP/2 on a unix socket, our own, no gRPC C core (issue 13): `frames.py` builds
and reads HTTP/2 frames, `wire.py` makes one unary call per connection (flow control, the
deadline, metadata such as containerd's namespace), `stream.py` one server-streaming call
(containerd's events), `answer.py` assembles an answer and judges its status, `statuses.py`
names failures as gRPC does, `gil.py` paces the client's thread. Used by the kubelet's client
and containerd's.

`_generated/` holds every Python protobuf stub, made by `protogen.py` from `protos/`
(the kubelet's pod-resources API, the part of containerd's API we read); regenerate them with
`tox -e protos` (or `python -m gpu_enricher.rpc.protogen`), never by hand.

May import: nothing of ours. Imported by: `kubelet`, `runtime`; `sim` uses the stubs.
"""
