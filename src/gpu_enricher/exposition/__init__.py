"""From snapshots to bytes: the node snapshot, the counters plan and the attribution joined
into dcgm-exporter's families (`join.py`) and the per-process ones (`process_families.py`),
the labels `--drop-labels` leaves off (`label_drop.py`), which devices `-d` selects and how
`-rbmn` and `-o` spell labels (`shape.py`), the text formats and their
negotiation (`render.py`), the exporter's own metrics (`selfmetrics.py`, rendered by
`ownmetrics.py`) and the query API's document (`query.py`). Pure.

May import: `model`, `fields`, `attribution`. Imported by: `collector`, `health`, `kubelet`,
`web`, `reload`, `cli`.
"""
