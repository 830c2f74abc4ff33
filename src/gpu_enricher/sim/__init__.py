"""The simulated node behind `--simulate`, so that a newcomer sees every feature without a GPU
or a cluster. A scenario (the built-in `builtin-scenario.yaml` or a file: `scenario.py`,
`scenario_pods.py`, `scenario_yaml.py`, `scenario_values.py`) describes GPUs, MIG instances,
processes and pods (`node.py`); the backend answers from it as NVML would (`backend.py`), with
its XIDs (`xids.py`) and pod churn (`churn.py`). Around it runs the cluster (`cluster.py`, its state
derived in `cluster_state.py`): a fake kubelet (`fake_kubelet/`) and a fake Kubernetes API
(`fake_api/`), served on a private socket and on loopback and used by the tests too, and a
/proc tree and log names in a temporary directory.

May import: `model`, `config`, `files`, `strict_yaml`, `fields`, `health`, and from `kube` and
`rpc` only what speaks their APIs (parse halves, protobuf stubs). Imported by: the
composition root only (`assembly`, `app`, `cli.main`).
"""
