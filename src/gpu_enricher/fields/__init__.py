"""What dcgm-exporter's output is made of, as data: the names a counters file may use
(`catalog.py`) and DCGM 1.x's lowercase ones (`legacy_names.py`); the implemented fields as one
table, field → NVML source → conversion → value format (`table.py`, its vocabulary in
`spec.py`, NVML's answers in dcgm-exporter's units in `convert.py`); the counters CSV and the
plan built from it (`counters.py`, the bundled `default-counters.csv`); where the counters come
from (`collection.py`) and dcgm-exporter's config file (`exporter_config.py`, Go's syntax in
`go_syntax.py`); dcgm-exporter's two namings, classic and DCGM 4.7's, with each name's unit
(`namings.py`, the bundled `default-counters-4.9.csv`); the label names and their order
(`names.py`). Pure, but for reading the counters and config files through `files`.

May import: `model`, `files`, `strict_yaml` (a config file given). Imported by: nearly every
part; it imports none of them.
"""
