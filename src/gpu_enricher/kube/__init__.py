"""This node's pods and its DRA ResourceSlices from the Kubernetes API, by list and watch: one
generic list+watch loop (`listwatch.py`) over raw API calls (`client.py`, where the server is
and how to authenticate in `config.py`), the sources built on it (`watch_source.py`, the pods'
`source.py`, the slices' `slice_source.py` and `slice_client.py`), and the pure halves that
read the answers (`events.py`, `pods.py`, `slices.py`).

Nothing here imports kubernetes_asyncio at import time: it costs about 37 MB and a second to
load, so only a source that is started with the feature on pulls it in (see `client.py`).

May import: `model`, `sources`, `fields`. Imported by: `assembly` and `app`; `sim.fake_api`
uses the pure halves.
"""
