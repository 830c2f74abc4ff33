"""The collection cycle. Each pass samples the GPU backend on one worker thread and refreshes the
other sources in their order (`loop.py`, `refresh.py`), joins every source's snapshot into the
DCGM, event, health and process families and the query document (`cycle.py`, pure), paints one
picture (`picture.py`) on a thread of its own, off the event loop, and swaps the bytes in
(`painting.py`, with the loop's lag watched by `lag.py`); `/metrics` and the query API only ever
read those bytes. Beside it: the pace of the passes, the first picture's bounded wait and the
repaints a source's news asks for (`pacing.py`), what a pass reads (the counters plan in force,
dcgm-exporter's watch groups: `watch.py`), what the collector is told at start (`options.py`),
the log lines that report a change once (`news.py`), --dump-enabled's files (`dump.py`) and the
per-pod counters kept across passes (`accounts.py` over `ledger.py`: GPU time, and `energy.py`:
energy).

May import: `model`, `sources`, `backend`, `worker`, `fields`, `attribution`, `exposition`,
`health`; never NVML, the kubelet or the API server themselves, which reach it as a
`GpuBackend` and `Source`s. Imported by: `assembly`, `app`, `reload`, `web.server`.
"""
