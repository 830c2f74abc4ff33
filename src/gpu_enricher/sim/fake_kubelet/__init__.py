"""The fake kubelet that `--simulate` and the tests serve: the pod-resources gRPC API on a unix
socket from in-memory state, with grpc.aio (`server.py`), its answers built apart from the
server (`answers.py`).

May import: `model` and the stubs in `rpc._generated`. Imported by: `sim.cluster`.
"""

import os

# gRPC's C core writes to stderr in its own format, past Python's logging and --log-format
# json: an INFO line for each GOAWAY a stopping kubelet sends, for one. Only its errors, unless
# the operator sets GRPC_VERBOSITY; set before `server.py` imports grpc (read at its start).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
