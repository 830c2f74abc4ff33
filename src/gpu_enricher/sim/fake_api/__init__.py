"""The fake Kubernetes API server that `--simulate` and the tests serve: pods and
ResourceSlices, list and watch over HTTP on loopback (`server.py`, the store and watch every
kind shares in `watch.py`), their objects built apart from the server (`objects.py`,
`slices.py`).

May import: `model` and `kube`'s parse halves (`events`, `pods`, `slices`). Imported by:
`sim.cluster`.
"""
