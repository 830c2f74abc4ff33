"""The collection cycle. Each pass samples the GPU backend on one worker thread and refreshes the
other sources (`loop.py`), joins every source's snapshot into the DCGM, event, health and
process families and the query document (`cycle.py`, pure), renders once and swaps the bytes
in; `/metrics` and the query API only ever read those bytes. Beside it: the pace of the passes
(`pacing.py`), the counters plan in force (`planner.py`), the fields read every N-th pass
(dcgm-exporter's watch groups, `watch.py`), what the collector is told at start
(`options.py`), one picture painted from every source's snapshot (`picture.py`), the first
picture's bounded wait for the labelling sources and the renders a source's news asks for
between passes (`first_picture.py`), the log lines that report a change once (`news.py`),
--dump-enabled's files
(`dump.py`) and the per-pod counters kept across passes (`accounts.py` over `ledger.py`:
GPU time, and `energy.py`: energy).

May import: `model`, `sources`, `backend`, `worker`, `fields`, `attribution`, `exposition`,
`health`; never NVML, the kubelet or the API server themselves, which reach it as a
`GpuBackend` and `Source`s. Imported by: `assembly`, `app`, `reload`, `web.server`.
"""
