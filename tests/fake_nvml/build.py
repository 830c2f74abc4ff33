"""Build and drive the fake ``libnvidia-ml.so.1`` (see README.md)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SOURCE = Path(__file__).resolve().with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
CFLAGS: tuple[str, ...] = (
    "-shared",
    "-fPIC",
    "-O2",
    "-Wall",
    f"-Wl,-soname,{LIBRARY_NAME}",
)
LIBS: tuple[str, ...] = ("-lpthread",)
XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError


@dataclass(frozen=True)
class FakeProcess:
    """One process on a fake GPU (see FAKE_NVML_PROCESSES in README.md)."""

    pid: int
    used_mib: int | None = 256
    """None: NVML reports NVML_VALUE_NOT_AVAILABLE (pynvml turns it into None)."""
    gpu_instance_id: int | None = None
    """The MIG GPU instance it runs in (reported only while the GPU is in MIG mode)."""
    sm_percent: int | None = None
    """None: nvmlDeviceGetProcessUtilization has no sample for it."""
    mem_percent: int | None = None
    kind: Literal["c", "g", "b", "m", "M"] = "c"
    """c: compute list, g: graphics list, b: both; m: the MPS list (an MPS client), M: the
    MPS and compute lists."""
    hide_gi: bool = False
    """The parent GPU's lists report gpuInstanceId 0xFFFFFFFF (its MIG handle still lists it)."""

    def spec(self) -> str:
        def opt(v: int | None) -> str:
            return "" if v is None else str(v)

        gi = opt(self.gpu_instance_id)
        if self.hide_gi:
            if self.gpu_instance_id is None:
                raise ValueError(f"pid {self.pid}: hide_gi needs a gpu_instance_id")
            gi = f"~{gi}"
        used = "-" if self.used_mib is None else str(self.used_mib)
        return (f"{self.pid}:{used}:{gi}:{opt(self.sm_percent)}:"
                f"{opt(self.mem_percent)}:{self.kind}")


ProcessSpec = FakeProcess | tuple[object, ...]


def _digest(source: bytes) -> str:
    h = hashlib.sha256()
    h.update(source)
    h.update("\0".join(CFLAGS + LIBS).encode())
    return h.hexdigest()[:32]


def _atomic_link(src: Path, dest: Path) -> None:
    """Make ``dest`` a copy of ``src`` (hard link if possible), atomically."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def build_fake_nvml(dest_dir: Path) -> Path:
    """Compile fake_nvml.c into ``dest_dir/libnvidia-ml.so.1`` and return it.

    The compiled library is cached as ``dest_dir/libnvidia-ml.<sha256>.so``
    (a digest of the source and flags); nothing is compiled when that file
    already exists. Every file is written under a temporary name and moved into
    place with ``os.replace``, so concurrent builds into one directory are safe.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    source = SOURCE.read_bytes()
    cached = dest_dir / f"libnvidia-ml.{_digest(source)}.so"
    target = dest_dir / LIBRARY_NAME

    if not cached.exists():
        gcc = shutil.which("gcc")
        if gcc is None:
            raise RuntimeError(
                "gcc was not found on PATH: it is needed to build the fake "
                f"NVML library from {SOURCE} (apt-get install gcc)"
            )
        fd, tmp_name = tempfile.mkstemp(prefix=".fake-nvml.", suffix=".so", dir=dest_dir)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            proc = subprocess.run(
                [gcc, *CFLAGS, "-o", str(tmp), str(SOURCE), *LIBS],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"building the fake NVML library failed "
                    f"(gcc exit {proc.returncode}):\n{proc.stderr}"
                )
            os.replace(tmp, cached)
        finally:
            tmp.unlink(missing_ok=True)

    if not (target.exists() and os.path.samefile(target, cached)):
        _atomic_link(cached, target)
    return target


class FakeNvml:
    """Typed access to the ``fake_nvml_*`` control functions.

    Constructing it loads the library with ``ctypes.CDLL(path)``; thanks to
    the soname, pynvml's later ``CDLL("libnvidia-ml.so.1")`` in the same
    process gets this very library. Build it before pynvml loads NVML.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lib = ctypes.CDLL(str(self.path))
        lib = self.lib
        lib.fake_nvml_reset.argtypes = []
        lib.fake_nvml_reset.restype = None
        lib.fake_nvml_last_error.argtypes = []
        lib.fake_nvml_last_error.restype = ctypes.c_char_p
        lib.fake_nvml_set_lost.argtypes = [ctypes.c_uint, ctypes.c_int]
        lib.fake_nvml_set_lost.restype = None
        lib.fake_nvml_set_not_supported.argtypes = [
            ctypes.c_uint,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        lib.fake_nvml_set_not_supported.restype = None
        lib.fake_nvml_set_mig.argtypes = [ctypes.c_uint, ctypes.c_char_p]
        lib.fake_nvml_set_mig.restype = ctypes.c_int
        lib.fake_nvml_set_processes.argtypes = [ctypes.c_uint, ctypes.c_char_p]
        lib.fake_nvml_set_processes.restype = ctypes.c_int
        lib.fake_nvml_proc_util_stamps.argtypes = [
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.POINTER(ctypes.c_ulonglong),
        ]
        lib.fake_nvml_proc_util_stamps.restype = None
        lib.fake_nvml_calls.argtypes = [ctypes.c_char_p]
        lib.fake_nvml_calls.restype = ctypes.c_ulonglong
        lib.fake_nvml_total_calls.argtypes = []
        lib.fake_nvml_total_calls.restype = ctypes.c_ulonglong
        lib.fake_nvml_init_refcount.argtypes = []
        lib.fake_nvml_init_refcount.restype = ctypes.c_uint
        lib.fake_nvml_set_cost_profile.argtypes = [ctypes.c_char_p]
        lib.fake_nvml_set_cost_profile.restype = ctypes.c_int
        lib.fake_nvml_cost_profile.argtypes = []
        lib.fake_nvml_cost_profile.restype = ctypes.c_char_p
        lib.fake_nvml_cost_us.argtypes = [ctypes.c_char_p]
        lib.fake_nvml_cost_us.restype = ctypes.c_uint
        lib.fake_nvml_field_cost_us.argtypes = [ctypes.c_uint]
        lib.fake_nvml_field_cost_us.restype = ctypes.c_uint
        lib.fake_nvml_cpu_ns.argtypes = [ctypes.c_char_p]
        lib.fake_nvml_cpu_ns.restype = ctypes.c_ulonglong
        lib.fake_nvml_total_cpu_ns.argtypes = []
        lib.fake_nvml_total_cpu_ns.restype = ctypes.c_ulonglong
        lib.fake_nvml_symbol_name.argtypes = [ctypes.c_uint]
        lib.fake_nvml_symbol_name.restype = ctypes.c_char_p
        lib.fake_nvml_key_name.argtypes = [ctypes.c_uint]
        lib.fake_nvml_key_name.restype = ctypes.c_char_p
        lib.fake_nvml_set_clock_events.argtypes = [ctypes.c_uint, ctypes.c_longlong]
        lib.fake_nvml_set_clock_events.restype = None
        lib.fake_nvml_inject_event.argtypes = [ctypes.c_uint, ctypes.c_ulonglong,
                                               ctypes.c_ulonglong]
        lib.fake_nvml_inject_event.restype = ctypes.c_int
        lib.fake_nvml_set_event_types.argtypes = [ctypes.c_uint, ctypes.c_longlong]
        lib.fake_nvml_set_event_types.restype = None
        lib.fake_nvml_event_sets.argtypes = []
        lib.fake_nvml_event_sets.restype = ctypes.c_uint
        lib.fake_nvml_event_registrations.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
        lib.fake_nvml_event_registrations.restype = ctypes.c_uint
        self.symbols: frozenset[str] = frozenset(self._names(lib.fake_nvml_symbol_name))
        self.keys: tuple[str, ...] = tuple(self._names(lib.fake_nvml_key_name))

    @staticmethod
    def _names(fn: Callable[[int], object]) -> list[str]:
        names: list[str] = []
        while (raw := fn(len(names))) is not None:
            assert isinstance(raw, bytes)
            names.append(raw.decode())
        return names

    def _check(self) -> None:
        err = self.lib.fake_nvml_last_error()
        if err:
            assert isinstance(err, bytes)
            raise ValueError(f"fake_nvml: {err.decode()}")

    @staticmethod
    def _index(index: int) -> int:
        if index < 0:
            raise ValueError(f"GPU index must be >= 0, got {index}")
        return index

    def reset(self) -> None:
        """Re-read FAKE_NVML_* from os.environ, zero counters, drop overrides.

        The nvmlInit refcount is kept. Raises ValueError if a variable is
        malformed (the library then behaves as with no variables set).
        """
        self.lib.fake_nvml_reset()
        self._check()

    def set_lost(self, index: int, lost: bool = True) -> None:
        """Make GPU ``index`` (and its MIG devices) answer GPU_IS_LOST."""
        self.lib.fake_nvml_set_lost(self._index(index), int(lost))
        self._check()

    def set_not_supported(self, index: int, key: str, on: bool = True) -> None:
        """Make query ``key`` answer NOT_SUPPORTED on GPU ``index`` (or not)."""
        if key not in self.keys:
            raise ValueError(f"unknown key {key!r}; known: {', '.join(self.keys)}")
        self.lib.fake_nvml_set_not_supported(self._index(index), key.encode(), int(on))
        self._check()

    def set_clock_events(self, index: int, mask: int | None) -> None:
        """GPU ``index``'s nvmlDeviceGetCurrentClocksEventReasons bitmask (None: the
        default, 0x1 GpuIdle on even GPUs and 0x4 SwPowerCap on odd ones)."""
        if mask is not None and not 0 <= mask < 1 << 63:
            raise ValueError(f"clock event mask must be 0 <= mask < 2**63, got {mask}")
        self.lib.fake_nvml_set_clock_events(self._index(index), -1 if mask is None else mask)
        self._check()

    def set_mig(self, index: int, spec: str | Sequence[tuple[int, int]] | None) -> None:
        """Set GPU ``index``'s GPU instances; None turns MIG mode off.

        ``spec`` is ``"gi:profile,gi:profile"`` or ``[(gi, profile), ...]``;
        an empty string or list means MIG mode on with no instances.
        """
        if spec is None:
            raw: bytes | None = None
        elif isinstance(spec, str):
            raw = spec.encode()
        else:
            raw = ",".join(f"{gi}:{prof}" for gi, prof in spec).encode()
        if self.lib.fake_nvml_set_mig(self._index(index), raw) != 0:
            err = self.lib.fake_nvml_last_error()
            msg = err.decode() if isinstance(err, bytes) else "bad spec"
            raise ValueError(f"fake_nvml: {msg}")

    def set_processes(self, index: int,
                      processes: str | Sequence[ProcessSpec] | None) -> None:
        """Set GPU ``index``'s processes; None goes back to FAKE_NVML_PROCESSES or the default.

        Entries are ``FakeProcess`` or tuples of its fields in order
        ``(pid, used_mib, gpu_instance_id, sm_percent, mem_percent, kind, hide_gi)``
        (trailing ones optional); a string is the FAKE_NVML_PROCESSES list after ``i=``.
        An empty list means no processes.
        """
        if processes is None:
            raw: bytes | None = None
        elif isinstance(processes, str):
            raw = processes.encode()
        else:
            procs = [p if isinstance(p, FakeProcess) else FakeProcess(*p)  # type: ignore[arg-type]
                     for p in processes]
            raw = ",".join(p.spec() for p in procs).encode()
        if self.lib.fake_nvml_set_processes(self._index(index), raw) != 0:
            err = self.lib.fake_nvml_last_error()
            msg = err.decode() if isinstance(err, bytes) else "bad spec"
            raise ValueError(f"fake_nvml: {msg}")

    def proc_util_stamps(self, index: int) -> tuple[int, int]:
        """GPU ``index``'s last nvmlDeviceGetProcessUtilization call: the
        lastSeenTimeStamp it was given and the newest sample timestamp it
        returned (0 when none since the last reset)."""
        seen, newest = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        self.lib.fake_nvml_proc_util_stamps(self._index(index), ctypes.byref(seen),
                                            ctypes.byref(newest))
        return int(seen.value), int(newest.value)

    def calls(self, symbol: str) -> int:
        """How many times NVML ``symbol`` was called since the last reset."""
        if symbol not in self.symbols:
            raise ValueError(f"{symbol!r} is not an NVML symbol the fake implements")
        return int(self.lib.fake_nvml_calls(symbol.encode()))

    def total_calls(self) -> int:
        """How many NVML calls (all symbols) were made since the last reset."""
        return int(self.lib.fake_nvml_total_calls())

    def set_cost_profile(self, profile: Literal["h100"] | None) -> None:
        """Make every NVML call burn the CPU it costs on real hardware ("h100"), or
        not (None); overrides FAKE_NVML_COST_PROFILE until the next reset()."""
        raw = None if profile is None else profile.encode()
        if self.lib.fake_nvml_set_cost_profile(raw) != 0:
            err = self.lib.fake_nvml_last_error()
            msg = err.decode() if isinstance(err, bytes) else "bad profile"
            raise ValueError(f"fake_nvml: {msg}")

    def cost_profile(self) -> str | None:
        """The cost profile in effect, or None when off."""
        raw = self.lib.fake_nvml_cost_profile()
        return raw.decode() if isinstance(raw, bytes) and raw else None

    def cost_us(self, symbol: str) -> int:
        """Microseconds of CPU one call of ``symbol`` burns under the profile in effect
        (0 when off); nvmlDeviceGetFieldValues: a batch without a costly field id."""
        if symbol not in self.symbols:
            raise ValueError(f"{symbol!r} is not an NVML symbol the fake implements")
        return int(self.lib.fake_nvml_cost_us(symbol.encode()))

    def field_cost_us(self, field_id: int) -> int:
        """Microseconds a field id adds to a nvmlDeviceGetFieldValues batch (0: none)."""
        return int(self.lib.fake_nvml_field_cost_us(field_id))

    def cpu_ns(self, symbol: str) -> int:
        """Thread CPU time spent inside calls of ``symbol`` while a cost profile was on,
        since the last reset (nanoseconds)."""
        if symbol not in self.symbols:
            raise ValueError(f"{symbol!r} is not an NVML symbol the fake implements")
        return int(self.lib.fake_nvml_cpu_ns(symbol.encode()))

    def cpu_ns_by_symbol(self) -> dict[str, int]:
        """cpu_ns() of every symbol with a non-zero count."""
        return {s: n for s in sorted(self.symbols) if (n := self.cpu_ns(s))}

    def total_cpu_ns(self) -> int:
        """cpu_ns() summed over all symbols."""
        return int(self.lib.fake_nvml_total_cpu_ns())

    def inject_event(self, index: int, event_type: int, data: int) -> int:
        """Queue an NVML event (``event_type`` one nvmlEventType* bit, ``data`` its
        eventData) in every live event set registered for it on GPU ``index``, waking
        blocked waiters; the number of sets (0: nobody listens, it is dropped)."""
        sets = int(self.lib.fake_nvml_inject_event(self._index(index), event_type, data))
        self._check()
        return sets

    def inject_xid(self, index: int, xid: int) -> int:
        """An XID (nvmlEventTypeXidCriticalError, eventData = the XID) on GPU ``index``;
        the number of event sets it reached (0: none registered, dropped)."""
        return self.inject_event(index, XID_CRITICAL_ERROR, xid)

    def set_event_types(self, index: int, mask: int | None) -> None:
        """The event types GPU ``index`` supports (None: the default 0xff9f of a real
        H100; 0: none, so registering answers NOT_SUPPORTED)."""
        self.lib.fake_nvml_set_event_types(self._index(index), -1 if mask is None else mask)
        self._check()

    def event_sets(self) -> int:
        """Live event sets (created in this NVML session and not freed)."""
        return int(self.lib.fake_nvml_event_sets())

    def event_registrations(self, index: int, event_types: int = 0x8) -> int:
        """Live event sets registered for any of ``event_types`` (default: XIDs) on GPU
        ``index``."""
        return int(self.lib.fake_nvml_event_registrations(self._index(index), event_types))

    def init_refcount(self) -> int:
        """nvmlInit* calls minus nvmlShutdown calls (0: not initialized)."""
        return int(self.lib.fake_nvml_init_refcount())
