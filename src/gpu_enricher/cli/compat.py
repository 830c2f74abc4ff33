"""dcgm-exporter's flags that gpu-enricher accepts and does not implement, each with its
reason, and how --help lists them. Data and text only.

Issue 24: a flag a manifest can set that changes what is exported is implemented; what is
left here needs a DCGM host engine, is served another way, or is Go's or for hosts without
Kubernetes (tests/cli holds that every accepted, unimplemented flag is in one of the three).
"""

import textwrap
from collections.abc import Sequence
from typing import Final

from .dcgm_flags import DcgmFlag

# dcgm-exporter flags that configure DCGM itself (its host engine, its library, its entities):
# gpu-enricher reads NVML in its own process, so with them nothing is missing, only nothing to
# configure. Set, each logs one INFO line with its reason (cli/main.py).
NEEDS_HOST_ENGINE: Final = {
    "remote-hostengine-info": "the nv-hostengine to connect to (the GPU Operator's standalone "
                              "DCGM); gpu-enricher reads NVML in its own process, no host "
                              "engine in between",
    "enable-dcgm-log": "the DCGM library's own log; there is no DCGM library here",
    "dcgm-log-level": "the DCGM library's log level; there is no DCGM library here",
    "watch-max-keep-age": "how long DCGM's field watches keep samples; gpu-enricher keeps none, "
                          "it reads each value once per pass",
    "watch-max-keep-samples": "how many samples DCGM's field watches keep; gpu-enricher keeps "
                              "none, it reads each value once per pass",
    "fake-gpus": "DCGM's injected fake GPUs; here --simulate is the fake node",
    "cpu-devices": "chooses the Grace CPUs and cores to watch: DCGM entities (its sysmon "
                   "module) that NVML does not have",
    "switch-devices": "chooses the NVSwitches and links to watch: DCGM entities (its NVSwitch "
                      "module) that NVML does not have",
    "disable-startup-validate": "skips dcgm-exporter's check that libdcgm is installed and its "
                                "exit when a DCGM collector cannot start; neither exists here",
}


# dcgm-exporter flags whose job gpu-enricher does another way, always: one INFO line when set.
SERVED_OTHERWISE: Final = {
    "enable-gpu-bind-unbind-watch": "always on here: the nvidia driver's sysfs directory is "
                                    "listed (a few µs) every --gpu-bind-unbind-poll-interval "
                                    "and every pass, and NVML restarts when a GPU was bound or "
                                    "unbound (docs/flags.md)",
}

# dcgm-exporter flags gpu-enricher does not implement, and why: a warning when set.
NOT_IMPLEMENTED: Final = {
    "enable-pprof": "Go's profiler endpoints; gpu-enricher is Python (attach py-spy to the "
                    "process instead)",
}


def _names(flag: DcgmFlag) -> str:
    return (f"-{flag.short}/" if flag.short else "") + f"--{flag.long}"


def compat_epilog(unimplemented: Sequence[DcgmFlag], width: int) -> str:
    """dcgm-exporter's flags that gpu-enricher accepts and does not implement, each with its
    reason: those that need a DCGM host engine; those served another way; those not
    implemented (tests/cli holds that every such flag is in one of the three)."""
    wrap = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="  ",
                                break_on_hyphens=False, break_long_words=False)
    hanging = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="      ",
                                   break_on_hyphens=False, break_long_words=False)

    def reasons(why: dict[str, str]) -> list[str]:
        return [hanging.fill(f"{_names(f)}: {why[f.long]}") for f in unimplemented
                if f.long in why]

    engine = ("Accepted so that dcgm-exporter manifests keep working, from the command line or "
              "dcgm-exporter's environment variables. These configure DCGM itself (its host "
              "engine, library or entities); gpu-enricher reads NVML in its own process, so one "
              "that is set logs one INFO line and changes nothing "
              f"({len(NEEDS_HOST_ENGINE)} flags):")
    environment = ("Every flag above also reads the environment when not given: "
                   "GPU_ENRICHER_<FLAG_NAME> first, then dcgm-exporter's variable (shown in "
                   "brackets); NODE_NAME sets the Hostname label. A bad value prints one line and "
                   "exits with status 2.")
    return "\n".join([
        *textwrap.wrap(environment, width),
        "",
        "dcgm-exporter compatibility (accepted, ignored):",
        wrap.fill(engine),
        *reasons(NEEDS_HOST_ENGINE),
        "",
        "dcgm-exporter flags served another way (accepted; one INFO line when set):",
        *reasons(SERVED_OTHERWISE),
        "",
        "dcgm-exporter flags not implemented (accepted; a warning when set):",
        *reasons(NOT_IMPLEMENTED),
    ])
