"""Which pod holds and which pod uses each GPU: the kubelet's device IDs in every form
(`devices.py`) and DRA claims (`claims.py`) resolved to this node's GPUs and MIG instances; the
GPU processes' pods and containers from /proc and their cgroups (`procfs.py`, read once per
pass by `proc_source.py`) and from the kubelet's log names (`podlogs.py`); the process → pod
join (`workloads.py`); a pod's own labels as metric labels (`podlabels.py`); the HPC jobs a
Slurm prolog's files name (`jobmap.py`, read by `jobmap_reader.py` for `jobmap_source.py`).
The kubelet's and the API server's answers come from `kubelet/` and `kube/`; this part joins
them.

May import: `model`, `sources`, `files`, `fields`. Imported by: `collector`, `exposition`,
`kubelet`, `assembly`.
"""
