"""The kubelet's pod-resources API: protobuf stubs, a stub generator and a fake kubelet server.

`_generated/` holds the Python stubs made by `protogen` from `protos/podresources/`; regenerate
them with `tox -e protos` (or `python -m gpu_enricher.kubelet.protogen`), never by hand.
"""
