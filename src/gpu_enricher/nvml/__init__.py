"""The NVML backend, and the only part that imports pynvml. One pass reads every GPU and MIG
instance on the collector's worker thread (`backend.py`): device calls and their errors
(`device.py`), field values (`fields.py`), the costly slow-changing ones on their own cadence
(`cadence.py`), GPM profiling (`gpm.py`), MIG profiles and entity ids (`mig.py`), the processes
(`processes.py`) and NVLink peer status
(`topology.py`). XIDs come from an NVML event set that a thread of its own waits on
(`event_set.py`), handed to the collector as a source (`events.py`). GPUs bound to or unbound
from the driver restart NVML (`binding.py`).

May import: `model`, `backend`, `fields`, `health` (the XID vocabulary). Imported by:
`assembly` only.
"""
