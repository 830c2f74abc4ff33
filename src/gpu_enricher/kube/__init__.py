"""This node's pods and its DRA ResourceSlices from the Kubernetes API, by list and watch.

Nothing here imports kubernetes_asyncio at import time: it costs about 37 MB and a second to
load, so only a source that is started with the feature on pulls it in (see `client.py`).
"""
