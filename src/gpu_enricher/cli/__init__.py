"""The command line: gpu-enricher's flags (`options.py`) and every flag of dcgm-exporter's
(`dcgm_flags.py`; those accepted and not implemented, with their reasons: `compat.py`), the
parser over both (`flags.py`), their values (`flag_values.py`), flags and environment variables
turned into one `Config` (`settings.py`), logging and exit codes (`main.py`, the `gpu-enricher`
entry point), and
`gpu-enricher inspect`, which reads the query API of a running exporter (`inspect.py`).

May import: every part; `main.py` hands the `Config` to `app` and `assembly`. Imported by:
`__main__` and the `gpu-enricher` script only.
"""
