"""A gRPC client's thread beside the event loop: the kubelet's receives and parses `List`
answers of tens of megabytes in Python, and gives the GIL back often enough that the loop
serving `/metrics` hardly waits for it."""

import time
from collections.abc import Callable
from typing import Final

GIL_SLICE_SECONDS: Final = 0.0003
GIL_PAUSE_SECONDS: Final = 0.0005
"""A thread doing Python work beside the event loop sleeps this long after each slice of
work: it holds the GIL only in short slices, so the loop (which needs the GIL for every
callback) waits for it rarely and briefly, instead of up to the 5 ms switch interval each
time (issue 13, defect 2). Each unit of the kubelet thread's work between two checks takes
well under a slice (a 256 KiB receive, a 64 KiB search window, one pod's parse): 2 ms
slices let a 50 MB `List` delay the loop by ~2 ms, 0.3 ms slices by ~0.6-0.9 ms."""


def gil_pacer(slice_seconds: float = GIL_SLICE_SECONDS,
              pause_seconds: float = GIL_PAUSE_SECONDS) -> Callable[[], None]:
    """A function to call between units of work: sleeps `pause_seconds` once `slice_seconds`
    of work have passed since the last pause."""
    resumed = time.perf_counter()

    def maybe_pause() -> None:
        nonlocal resumed
        if time.perf_counter() - resumed >= slice_seconds:
            time.sleep(pause_seconds)
            resumed = time.perf_counter()

    return maybe_pause
