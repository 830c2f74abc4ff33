"""The kubelet's pod-resources API: protobuf stubs, a stub generator and a fake kubelet server.

`_generated/` holds the Python stubs made by `protogen` from `protos/podresources/`; regenerate
them with `tox -e protos` (or `python -m gpu_enricher.kubelet.protogen`), never by hand.
"""

import os

# gRPC's C core writes to stderr in its own format, past Python's logging and --log-format
# json: an INFO line for each GOAWAY a stopping kubelet sends, for one. Only its errors, unless
# the operator sets GRPC_VERBOSITY; set before this package imports grpc (read at its start).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
