"""XIDs, clock events and GPU health as dcgm-exporter 4.x exports them: the XID vocabulary and
its messages (`xid.py`, `xid_messages.py`), counting events in a window and since start
(`event_counts.py`), the clock-event counts and health verdicts taken from each GPU pass
(`clock_events.py`, `source.py`, their common shape in `pass_source.py`), the health rules
(`rules.py`), and the families they make (`event_families.py`, `status_families.py`). No I/O:
the XID events themselves come from `nvml.events` (or `sim.xids`).

May import: `model`, `fields`, `exposition` (to render its families). Imported by:
`collector`, `nvml`, `sim`, `assembly`.
"""
