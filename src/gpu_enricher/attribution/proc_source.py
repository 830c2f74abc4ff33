"""The GPU processes' `/proc` entries, read once per collection cycle after the GPU pass.

NVML reports host PIDs, so this needs the host's /proc: hostPID, or the host's /proc mounted
read-only at --proc-root. Without it, processes still count but carry no pod or container.
"""

import asyncio
import logging
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..fields import names
from ..model import NodeSnapshot, ProcessTable, SourceHealth
from .procfs import ProcReader, ProcRootError, ReaderBusy

log = logging.getLogger(__name__)

HINT: Final = "mount the host's /proc read-only at --proc-root or run with hostPID: true"
NO_PROC_ROOT: Final = "no_proc_root"
INTERNAL: Final = "internal"
BUSY: Final = "busy"
EMPTY: Final = ProcessTable()


def gpu_pids(gpus: NodeSnapshot) -> set[int]:
    """The PIDs of every process on every healthy GPU (MIG instances' processes included)."""
    return {process.pid for gpu in gpus.gpus if gpu.healthy for process in gpu.processes}


class ProcessSource:
    """Satisfies `Source[ProcessTable]`."""

    name = "proc"
    after_gpus = True

    def __init__(self, root: Path, reader: ProcReader | None = None) -> None:
        self.root = root
        self.reader = reader if reader is not None else ProcReader(root)
        self._table = EMPTY
        self._up = False
        self._problem: str | None = None  # what was last logged, so each change logs once
        self.collections = 0
        self.errors: Counter[str] = Counter()
        self.vanished = 0
        self.last_duration: float | None = None
        self.last_success_wall: float | None = None

    async def start(self) -> None:
        """Nothing runs in the background: all work happens in refresh."""

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """Read the /proc entries of the PIDs the GPU pass reported; never raises."""
        if gpus is None:  # no GPU pass, no PIDs: an old table could name reused PIDs
            self._table = EMPTY
            return
        pids = gpu_pids(gpus)
        started = time.perf_counter()
        try:
            if not pids:
                # Idle GPUs, the common case: only the root is checked (two syscalls, no
                # /proc/<pid> file), so no thread hop; a wrong --proc-root is still reported.
                table = self.reader.read(pids)
            elif self.reader.busy:
                # A timed-out pass left its read running in its thread: another thread would
                # only wait behind it, one more per pass.
                raise ReaderBusy
            else:
                table = await asyncio.to_thread(self.reader.read, pids)
        except ReaderBusy:
            self._busy()
            return
        except ProcRootError as exc:
            self._failed(NO_PROC_ROOT, f"cannot read {self.root} ({exc.strerror or exc}): "
                         f"GPU processes carry no pod or container; {HINT}")
            return
        except Exception:
            self._failed(INTERNAL, "reading the GPU processes' /proc entries failed",
                         exc_info=True)
            return
        stats = self.reader.last
        self._table = table
        self._up = True
        self.collections += 1
        self.vanished += stats.vanished
        self.errors.update(stats.errors)
        self.last_duration = time.perf_counter() - started
        self.last_success_wall = time.time()
        # Every PID missing usually means the container's own /proc, not the host's.
        if pids and stats.vanished == len(pids):
            self._problem_is("not_host", "none of the %d GPU processes NVML reported is in %s; "
                             "if this persists, %s", len(pids), self.root, HINT)
        elif table.processes or self._problem != "not_host":  # no PIDs prove nothing here
            self._problem_is(None, "the GPU processes' /proc entries are readable again")

    def _busy(self) -> None:
        """Keep the last table: the stuck read may finish, and these PIDs mostly still run."""
        self.errors[BUSY] += 1
        self._up = False
        self._problem_is(BUSY, "a /proc read from a previous pass is still running (stuck in "
                         "the kernel?); keeping the last %d processes and not reading %s "
                         "until it ends", len(self._table.processes), self.root)

    def _failed(self, reason: str, message: str, exc_info: bool = False) -> None:
        self.errors[reason] += 1
        self._up = False
        self._table = EMPTY
        self._problem_is(reason, "%s", message, exc_info=exc_info)

    def _problem_is(self, problem: str | None, message: str, *args: object,
                    exc_info: bool = False) -> None:
        """Log when the problem starts, changes or ends; stay quiet while it persists."""
        if problem == self._problem:
            return
        if problem is not None:
            log.warning(message, *args, exc_info=exc_info)
        elif self._problem is not None:
            log.warning(message, *args)
        self._problem = problem

    def snapshot(self) -> ProcessTable:
        return self._table

    def health(self) -> SourceHealth:
        return SourceHealth(self._up, self.collections, dict(self.errors), self.last_duration,
                            self.last_success_wall)

    def families(self) -> list[Metric]:
        prefix = names.SELF_PREFIX
        return [
            GaugeMetricFamily(f"{prefix}proc_processes",
                              "GPU processes found in /proc in the last pass.",
                              value=len(self._table.processes)),
            GaugeMetricFamily(f"{prefix}proc_cache_entries",
                              "Processes whose name and container are cached by PID and "
                              "start time.", value=self.reader.cache_entries),
            CounterMetricFamily(f"{prefix}proc_vanished_processes",
                                "GPU processes that exited before their /proc entry was read.",
                                value=self.vanished),
        ]

    async def close(self) -> None:
        """Nothing to release."""


if TYPE_CHECKING:  # mypy proves the protocol is met without a runtime import cycle
    from ..sources import Source

    _conforms: Source[ProcessTable] = ProcessSource(Path("/proc"))
