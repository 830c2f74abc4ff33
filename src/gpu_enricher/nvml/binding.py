"""GPUs bound to and unbound from the nvidia driver while the exporter runs (dcgm-exporter's
--enable-gpu-bind-unbind-watch, always on here: one directory listing a pass).

NVML enumerates GPUs at `nvmlInit`, and an initialised NVML holds each GPU's device file open.
The kernel's unbind (`echo ADDR > /sys/bus/pci/drivers/nvidia/unbind`) removes the device's
link from the driver's sysfs directory first, then calls the driver's remove, which waits while
the device is still open (the nvidia driver logs "Attempting to remove device ... with non-zero
usage count!" and polls every 500 ms). So a change in that directory means: shut NVML down (the
unbind can finish), wait for the driver's remove to see it, and initialise NVML again (a bound
GPU is enumerated, an unbound one is gone). dcgm-exporter does the same with DCGM's bind/unbind
field: it shuts DCGM down and builds everything again.

Each pass looks (the backend restarts NVML before reading), and between passes
`watch_bindings` looks every --gpu-bind-unbind-poll-interval (1 s, as dcgm-exporter polls) and
asks for a pass at once on a change, so an unbind waits about that long, not a whole collection
interval. The fetch half is `bound_devices` (one `listdir`); `BindingWatch` is the pure
comparison.
"""

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

NVIDIA_DRIVER_DIR: Final = Path("/sys/bus/pci/drivers/nvidia")
UNBIND_GRACE_SECONDS: Final = 1.0
"""How long NVML stays shut after a GPU left the driver: two of the driver's 500 ms checks of
the device's usage count, so its remove finishes before NVML opens devices again."""

_PCI_ADDRESS: Final = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def bound_devices(driver_dir: Path) -> frozenset[str] | None:
    """The PCI addresses bound to the driver; None when the directory cannot be read (no
    sysfs in this container, or no nvidia driver loaded)."""
    try:
        names = os.listdir(driver_dir)
    except OSError:
        return None
    return frozenset(n for n in names if _PCI_ADDRESS.fullmatch(n))


class BindingWatch:
    """The driver's bound set seen at the last look; `change` says what moved since."""

    __slots__ = ("_bound",)

    def __init__(self) -> None:
        self._bound: frozenset[str] | None = None

    def change(self, bound: frozenset[str] | None) -> tuple[frozenset[str], frozenset[str]]:
        """(bound since, unbound since) the last look; nothing on the first look or while the
        directory is unreadable (no change can be told)."""
        before, self._bound = self._bound, bound if bound is not None else self._bound
        if before is None or bound is None:
            return frozenset(), frozenset()
        return bound - before, before - bound


async def watch_bindings(driver_dir: Path, interval_seconds: float,
                         on_change: Callable[[], None]) -> None:
    """Every `interval_seconds`, one listing (a few µs, on the event loop); `on_change` (a pass
    at once) when the bound set moved. Runs until cancelled."""
    watch = BindingWatch()
    while True:
        bound, unbound = watch.change(bound_devices(driver_dir))
        if bound or unbound:
            on_change()
        await asyncio.sleep(interval_seconds)
