"""Smoke check of the fake NVML library through pynvml (not a pytest file).

Run:  python tests/fake_nvml/smoke_check.py   (exit status 0 when all pass)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml

from tests.fake_nvml.build import FakeNvml, FakeProcess, build_fake_nvml

MIB = 1024 * 1024
GIB = 1024 * MIB
FAILURES: list[str] = []


def show(label: str, value: object) -> None:
    print(f"  {label:<58} {value!s}")


def expect(label: str, got: object, want: object) -> None:
    if got == want:
        show(label, got)
    else:
        FAILURES.append(label)
        print(f"  FAIL {label}: got {got!r}, want {want!r}")


def expect_error(label: str, err: type[BaseException], fn: Callable[[], object]) -> None:
    try:
        got = fn()
    except err as exc:
        show(label, f"{type(exc).__name__}: {exc}")
        return
    except Exception as exc:
        FAILURES.append(label)
        print(f"  FAIL {label}: raised {type(exc).__name__}: {exc}, want {err.__name__}")
        return
    FAILURES.append(label)
    print(f"  FAIL {label}: returned {got!r}, want {err.__name__}")


def addr(handle: Any) -> int | None:
    value = ctypes.cast(handle, ctypes.c_void_p).value
    return None if value is None else int(value)


def bind(call: Callable[[Any], object], arg: Any) -> Callable[[], object]:
    return lambda: call(arg)


def proc_util_or_none(h: Any, last_seen: int = 0) -> object:
    """Process utilization, None for NOT_FOUND (no samples is an answer, not a failure)."""
    try:
        return pynvml.nvmlDeviceGetProcessUtilization(h, last_seen)
    except pynvml.NVMLError_NotFound:
        return None


def procs(call: Callable[[Any], Any], h: Any) -> list[tuple[int, int | None, int, int]]:
    return [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in call(h)]


def util_samples(h: Any, last_seen: int) -> list[tuple[int, int, int]]:
    return [(u.pid, u.smUtil, u.memUtil) for u in
            pynvml.nvmlDeviceGetProcessUtilization(h, last_seen)]


def set_env(**values: str) -> None:
    for name in [n for n in os.environ if n.startswith("FAKE_NVML_")]:
        del os.environ[name]
    for name, value in values.items():
        os.environ[f"FAKE_NVML_{name}"] = value


def section(title: str) -> None:
    print(f"\n== {title}")


def check_gpu(i: int) -> None:
    section(f"GPU {i} (no MIG)")
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    expect("nvmlDeviceGetIndex", pynvml.nvmlDeviceGetIndex(h), i)
    expect("nvmlDeviceGetName", pynvml.nvmlDeviceGetName(h), "NVIDIA H100 80GB HBM3")
    uuid = pynvml.nvmlDeviceGetUUID(h)
    expect("nvmlDeviceGetUUID", uuid, f"GPU-fa4e{i:04x}-7953-256e-8f33-1343419b1a1c")
    expect(
        "nvmlDeviceGetHandleByUUID is same handle",
        addr(pynvml.nvmlDeviceGetHandleByUUID(uuid)),
        addr(h),
    )
    expect("nvmlDeviceGetSerial", pynvml.nvmlDeviceGetSerial(h), f"165092400{i:04d}")
    expect("nvmlDeviceGetVbiosVersion", pynvml.nvmlDeviceGetVbiosVersion(h), "96.00.89.00.01")
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    bus = 0x18 + 0x10 * i
    expect("pci.busId", pci.busId, f"00000000:{bus:02X}:00.0")
    expect("pci.busIdLegacy", pci.busIdLegacy, f"00000000:{bus:02X}:00.0")
    expect("pci domain/bus/device", (pci.domain, pci.bus, pci.device), (0, bus, 0))
    expect("pci ids", (hex(pci.pciDeviceId), hex(pci.pciSubSystemId)), ("0x233010de", "0x16c110de"))
    expect(
        "nvmlDeviceGetHandleByPciBusId is same handle",
        addr(pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId)),
        addr(h),
    )
    expect(
        "  ... short form 0000:BB:00.0",
        addr(pynvml.nvmlDeviceGetHandleByPciBusId(f"0000:{bus:02x}:00.0")),
        addr(h),
    )
    expect("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber(h), i)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    expect("nvmlDeviceGetUtilizationRates", (util.gpu, util.memory), (10 + 10 * i, 5 + i))
    expect(
        "nvmlDeviceGetEncoderUtilization",
        pynvml.nvmlDeviceGetEncoderUtilization(h),
        [1 + i, 167000],
    )
    expect(
        "nvmlDeviceGetDecoderUtilization",
        pynvml.nvmlDeviceGetDecoderUtilization(h),
        [2 + i, 167000],
    )
    used = 1024 * (i + 1) * MIB
    m1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    expect(
        "nvmlDeviceGetMemoryInfo (v1) total/free/used",
        (m1.total, m1.free, m1.used),
        (80 * GIB, 80 * GIB - 512 * MIB - used, used + 512 * MIB),
    )
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    expect(
        "nvmlDeviceGetMemoryInfo_v2 version/total/reserved/free/used",
        (m2.version, m2.total, m2.reserved, m2.free, m2.used),
        (pynvml.nvmlMemory_v2, 80 * GIB, 512 * MIB, 80 * GIB - 512 * MIB - used, used),
    )
    expect_error(
        "nvmlDeviceGetMemoryInfo_v2 with version 0x01000028",
        pynvml.NVMLError_ArgumentVersionMismatch,
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=0x01000028),
    )
    expect("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage(h), 16365 + 1000 * i)
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    e2 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    expect(
        "nvmlDeviceGetTotalEnergyConsumption x2",
        (e1, e2),
        (1000000 + 1000 * i, 1000100 + 1000 * i),
    )
    expect(
        "nvmlDeviceGetClockInfo G/SM/MEM/VIDEO",
        [pynvml.nvmlDeviceGetClockInfo(h, t) for t in range(4)],
        [1410 + i, 1410 + i, 1593, 1275],
    )
    expect(
        "nvmlDeviceGetMaxClockInfo G/SM/MEM/VIDEO",
        [pynvml.nvmlDeviceGetMaxClockInfo(h, t) for t in range(4)],
        [1980, 1980, 2619, 1755],
    )
    expect_error(
        "nvmlDeviceGetClockInfo(type 7)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetClockInfo(h, 7),
    )
    expect("nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature(h, 0), 30 + i)
    expect("nvmlDeviceGetTemperatureV", pynvml.nvmlDeviceGetTemperatureV(h, 0), 30 + i)
    expect_error(
        "nvmlDeviceGetTemperature(sensor 1)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetTemperature(h, 1),
    )
    ids = [82, 3, 4, 5, 6, 142, 143, 145, 999]
    fv = pynvml.nvmlDeviceGetFieldValues(h, ids)
    got = [
        (
            v.fieldId,
            v.nvmlReturn,
            v.valueType,
            v.value.ullVal if v.valueType == 3 else v.value.uiVal,
        )
        for v in fv
    ]
    want = (
        [(82, 0, 1, 40 + i)]
        + [(f, 0, 3, i) for f in (3, 4, 5, 6)]
        + [(f, 0, 1, 0) for f in (142, 143, 145)]
        + [(999, 3, 1, 0)]
    )
    expect("nvmlDeviceGetFieldValues (id, rc, type, value)", got, want)
    expect("  timestamps set", all(v.timestamp > 1_600_000_000_000_000 for v in fv), True)
    expect("nvmlDeviceGetPcieReplayCounter", pynvml.nvmlDeviceGetPcieReplayCounter(h), i)
    check_throttling_limits_and_labels(h, i)
    for name in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ):
        procs = getattr(pynvml, name)(h)
        expect(
            name,
            [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in procs],
            [(4000 + i, 256 * MIB, 0xFFFFFFFF, 0xFFFFFFFF)] if i % 2 == 0 else [],
        )
    expect_error(
        "nvmlDeviceGetProcessUtilization (default: no samples)",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetProcessUtilization(h, 0),
    )
    expect("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode(h), [0, 0])
    expect("nvmlDeviceIsMigDeviceHandle", pynvml.nvmlDeviceIsMigDeviceHandle(h).value, 0)
    expect("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount(h), 0)
    expect_error(
        "nvmlDeviceGetMigDeviceHandleByIndex(0)",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0),
    )
    expect_error(
        "nvmlDeviceGetGpuInstanceId",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetGpuInstanceId(h),
    )
    expect_error(
        "nvmlDeviceGetGpuInstanceById(1)",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetGpuInstanceById(h, 1),
    )
    expect_error(
        "nvmlDeviceGetGpuInstanceProfileInfo(0)",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0),
    )
    gpm = pynvml.nvmlGpmQueryDeviceSupport(h)
    expect("nvmlGpmQueryDeviceSupport", (gpm.version, gpm.isSupportedDevice), (1, 0))


def check_throttling_limits_and_labels(h: Any, i: int) -> None:
    """Violation times, clock events, retired pages, licence, power limits, fan, pstate,
    inforom, brand and NVLink field values of GPU i (issue 12's fields)."""
    expect("nvmlDeviceGetViolationStatus policies 0-5, 10, 11 (ns)",
           [pynvml.nvmlDeviceGetViolationStatus(h, p).violationTime
            for p in (0, 1, 2, 3, 4, 5, 10, 11)],
           [1_000_000 * (p + 1) + 1000 * i for p in (0, 1, 2, 3, 4, 5, 10, 11)])
    expect("  referenceTime set",
           pynvml.nvmlDeviceGetViolationStatus(h, 0).referenceTime > 1_600_000_000_000_000, True)
    expect_error("nvmlDeviceGetViolationStatus(policy 6)", pynvml.NVMLError_InvalidArgument,
                 lambda: pynvml.nvmlDeviceGetViolationStatus(h, 6))
    expect("nvmlDeviceGetCurrentClocksEventReasons",
           pynvml.nvmlDeviceGetCurrentClocksEventReasons(h), 0x4 if i % 2 else 0x1)
    expect("nvmlDeviceGetRetiredPages(SBE, DBE)",
           (pynvml.nvmlDeviceGetRetiredPages(h, 0), pynvml.nvmlDeviceGetRetiredPages(h, 1)),
           ([0x1000 * (k + 1) for k in range(i + 1)], [0x1000 * (k + 1) + 1 for k in range(i)]))
    expect("nvmlDeviceGetRetiredPagesPendingStatus",
           pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h), i % 2)
    lic = pynvml.nvmlDeviceGetGridLicensableFeatures(h)
    feature = lic.gridLicensableFeatures[0]
    expect("nvmlDeviceGetGridLicensableFeatures (supported, count, code, state)",
           (lic.isGridLicenseSupported, lic.licensableFeaturesCount, feature.featureCode,
            feature.featureState),
           (0, 0, 0, 0) if i % 3 == 2 else (1, 1, 1, 1 if i % 3 == 0 else 0))
    expect("power limit / enforced / default / constraints (mW)",
           (pynvml.nvmlDeviceGetPowerManagementLimit(h),
            pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
            pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h),
            pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)),
           (699500 - 100000 * (i % 5), 699500 - 100000 * (i % 5), 700000, [200000, 700000]))
    expect("nvmlDeviceGetFanSpeed", pynvml.nvmlDeviceGetFanSpeed(h), 30 + i)
    expect("nvmlDeviceGetPerformanceState", pynvml.nvmlDeviceGetPerformanceState(h),
           8 if i % 2 else 0)
    expect("nvmlDeviceGetBrand", pynvml.nvmlDeviceGetBrand(h), 2 if i % 2 else 14)
    expect("nvmlDeviceGetInforomVersion OEM/ECC/POWER",
           [pynvml.nvmlDeviceGetInforomVersion(h, o) for o in range(3)], ["2.1", "7.16", "1.1"])
    expect_error("nvmlDeviceGetInforomVersion(DEN)", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceGetInforomVersion(h, 3))
    expect("nvmlDeviceGetInforomImageVersion", pynvml.nvmlDeviceGetInforomImageVersion(h),
           "G520.0200.00.05")
    fv = pynvml.nvmlDeviceGetFieldValues(h, [38, 45, 52, 59, (139, 0), (138, 0), (139, 17),
                                             (139, 0xFFFFFFFF), (139, 18)])
    expect("NVLink error totals 38/45/52/59 (rc, type, value)",
           [(v.nvmlReturn, v.valueType, v.value.ullVal) for v in fv[:4]],
           [(0, 3, 10 + i), (0, 3, 20 + i), (0, 3, 30 + i), (0, 3, 40 + i)])
    rx0, tx0, rx17, rx_all = (v.value.ullVal for v in fv[4:8])
    elapsed = rx0 // (1 + i)
    expect("NVLink KiB counters: RX/TX link 0, RX link 17, RX all links (KiB per us)",
           (rx0 % (1 + i), tx0, rx17, rx_all),
           (0, 2 * rx0, (18 + i) * elapsed, (18 * (1 + i) + 153) * elapsed))
    expect("  link 18: per-field INVALID_ARGUMENT", fv[8].nvmlReturn, 2)
    expect_error("nvmlDeviceGetP2PStatus(self)", pynvml.NVMLError_InvalidArgument,
                 lambda: pynvml.nvmlDeviceGetP2PStatus(h, h, 2))


def check_defaults(fake: FakeNvml) -> None:
    section("before nvmlInit")
    expect("refcount", fake.init_refcount(), 0)
    expect_error("nvmlDeviceGetCount", pynvml.NVMLError_Uninitialized, pynvml.nvmlDeviceGetCount)
    # pynvml loads the library inside nvmlInit, so call the symbol directly here.
    count = ctypes.c_uint()
    expect("raw nvmlDeviceGetCount_v2 rc", fake.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), 1)

    section("init / system")
    pynvml.nvmlInit()
    expect("pynvml loaded the same library", pynvml.nvmlLib._handle, fake.lib._handle)
    expect("refcount", fake.init_refcount(), 1)
    expect("nvmlInitWithFlags calls", fake.calls("nvmlInitWithFlags"), 1)
    expect("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion(), "580.105.08")
    expect("nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion(), "13.580.105.08")
    expect("nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion(), 13000)
    expect("nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion_v2(), 13000)
    expect("nvmlErrorString(15)", pynvml.nvmlErrorString(15), "GPU is lost")
    expect("nvmlErrorString(12345)", pynvml.nvmlErrorString(12345), "Unknown Error")
    expect(
        "str(NVMLError(25)) (via nvmlErrorString)",
        str(pynvml.NVMLError(25)),
        "Argument version mismatch",
    )
    expect("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount(), 2)

    for i in range(2):
        check_gpu(i)

    section("bad arguments and handles")
    expect_error(
        "nvmlDeviceGetHandleByIndex(2)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetHandleByIndex(2),
    )
    expect_error(
        "nvmlDeviceGetHandleByUUID(unknown)",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetHandleByUUID("GPU-nope"),
    )
    expect_error(
        "nvmlDeviceGetHandleByPciBusId(00000000:99:00.0)",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetHandleByPciBusId("00000000:99:00.0"),
    )
    expect_error(
        "nvmlDeviceGetHandleByPciBusId(garbage)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetHandleByPciBusId("garbage"),
    )
    expect_error(
        "NULL handle",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetPowerUsage(pynvml.c_nvmlDevice_t()),
    )
    buf = ctypes.create_string_buffer(64)
    foreign = ctypes.cast(buf, pynvml.c_nvmlDevice_t)
    expect_error(
        "foreign handle",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetName(foreign),
    )
    expect_error(
        "foreign GPU-instance handle",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlGpuInstanceGetInfo(ctypes.cast(buf, pynvml.c_nvmlGpuInstance_t)),
    )

    section("call counters")
    expect("calls(nvmlDeviceGetPowerUsage)", fake.calls("nvmlDeviceGetPowerUsage"), 3)
    expect(
        "calls(nvmlDeviceGetTotalEnergyConsumption)",
        fake.calls("nvmlDeviceGetTotalEnergyConsumption"),
        4,
    )
    expect("calls(nvmlDeviceGetHandleByIndex_v2)", fake.calls("nvmlDeviceGetHandleByIndex_v2"), 3)
    expect("calls(nvmlErrorString) > 0", fake.calls("nvmlErrorString") > 0, True)
    show("total_calls()", fake.total_calls())
    expect_error("calls('nvmlNoSuchThing')", ValueError, lambda: fake.calls("nvmlNoSuchThing"))


def check_not_supported_keys(fake: FakeNvml) -> None:
    section("every NOT_SUPPORTED key, set at run time on GPU 0")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    probes: dict[str, Callable[[], object]] = {
        "util": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        "enc": lambda: pynvml.nvmlDeviceGetEncoderUtilization(h),
        "dec": lambda: pynvml.nvmlDeviceGetDecoderUtilization(h),
        "memory": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "memory_v2": lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        "power": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        "energy": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
        "clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, 0),
        "temp": lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
        "pcie_replay": lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h),
        "minor": lambda: pynvml.nvmlDeviceGetMinorNumber(h),
        "processes": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        "serial": lambda: pynvml.nvmlDeviceGetSerial(h),
        "vbios": lambda: pynvml.nvmlDeviceGetVbiosVersion(h),
        "proc_util": lambda: proc_util_or_none(h),
        "violation": lambda: pynvml.nvmlDeviceGetViolationStatus(h, 0),
        "clock_events": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "retired": lambda: pynvml.nvmlDeviceGetRetiredPages(h, 0),
        "license": lambda: pynvml.nvmlDeviceGetGridLicensableFeatures(h),
        "power_limit": lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h),
        "fan": lambda: pynvml.nvmlDeviceGetFanSpeed(h),
        "pstate": lambda: pynvml.nvmlDeviceGetPerformanceState(h),
        "inforom": lambda: pynvml.nvmlDeviceGetInforomImageVersion(h),
        "brand": lambda: pynvml.nvmlDeviceGetBrand(h),
        "p2p": lambda: pynvml.nvmlDeviceGetP2PStatus(h, pynvml.nvmlDeviceGetHandleByIndex(1), 2),
        "mps": lambda: pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(h),
    }
    expect("keys cover all probes + memtemp, nvlink", sorted(fake.keys),
           sorted([*probes, "memtemp", "nvlink"]))
    for key, probe in probes.items():
        fake.set_not_supported(0, key)
        expect_error(f"{key} on", pynvml.NVMLError_NotSupported, probe)
        fake.set_not_supported(0, key, False)
        probe()
    fake.set_not_supported(0, "temp")
    expect_error(
        "temp on: nvmlDeviceGetTemperatureV too",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetTemperatureV(h, 0),
    )
    fake.set_not_supported(0, "clock")
    expect_error(
        "clock on: nvmlDeviceGetMaxClockInfo too",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, 0),
    )
    fake.set_not_supported(0, "memtemp")
    fv = pynvml.nvmlDeviceGetFieldValues(h, [82, 3])
    expect("memtemp on: per-field rc of 82 / of 3", (fv[0].nvmlReturn, fv[1].nvmlReturn), (3, 0))
    fake.set_not_supported(0, "memtemp", False)
    fake.set_not_supported(0, "retired")
    expect_error("retired on: pending status too", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h))
    fake.set_not_supported(0, "power_limit")
    expect_error("power_limit on: enforced, default, constraints too",
                 pynvml.NVMLError_NotSupported,
                 lambda: (pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
                          pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h),
                          pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)))
    fake.set_not_supported(0, "inforom")
    expect_error("inforom on: nvmlDeviceGetInforomVersion too", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceGetInforomVersion(h, 0))
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    expect("nvmlDeviceGetP2PStatus 1 -> 0, indexes 0-4 (nvlink off)",
           [pynvml.nvmlDeviceGetP2PStatus(h1, h, k) for k in range(5)], [0] * 5)
    expect_error("nvmlDeviceGetP2PStatus(index 5)", pynvml.NVMLError_InvalidArgument,
                 lambda: pynvml.nvmlDeviceGetP2PStatus(h1, h, 5))
    fake.set_not_supported(0, "nvlink")
    fv = pynvml.nvmlDeviceGetFieldValues(h, [38, 45, 52, 59, (139, 0), (138, 0xFFFFFFFF), 82])
    expect("nvlink on: per-field rc of 38/45/52/59/139/138 / of 82",
           [v.nvmlReturn for v in fv], [3, 3, 3, 3, 3, 3, 0])
    expect("nvlink on: P2P status NVLINK / PCI (5 = NotSupported)",
           [pynvml.nvmlDeviceGetP2PStatus(h1, h, k) for k in (2, 4)], [5, 0])
    fake.set_not_supported(1, "p2p")
    expect_error("p2p on GPU 1: asked from GPU 0 too", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceGetP2PStatus(h, h1, 4))
    fake.set_clock_events(0, 0x8 | 0x20)
    expect("set_clock_events(0, 0x28)", pynvml.nvmlDeviceGetCurrentClocksEventReasons(h), 0x28)
    fake.set_clock_events(0, None)
    expect("set_clock_events(0, None): default",
           pynvml.nvmlDeviceGetCurrentClocksEventReasons(h), 0x1)
    fake.set_clock_events(1, 0x4000)
    expect_error("unknown key", ValueError, lambda: fake.set_not_supported(0, "nope"))
    fake.reset()
    expect("reset clears overrides: power", pynvml.nvmlDeviceGetPowerUsage(h), 16365)
    expect("reset zeroes counters", fake.calls("nvmlDeviceGetHandleByIndex_v2"), 0)
    expect("reset clears overrides: clock events",
           pynvml.nvmlDeviceGetCurrentClocksEventReasons(pynvml.nvmlDeviceGetHandleByIndex(1)),
           0x4)


def check_env_config(fake: FakeNvml) -> None:
    section("environment: 4 GPUs, MIG on 1 and 3, not-supported, minor, driver")
    set_env(
        GPU_COUNT="4",
        MIG="1=1:9,2:19;3=",
        NOT_SUPPORTED="0:power,*:vbios,3:memtemp",
        MINOR="0:3,3:0",
        DRIVER_VERSION="570.1.2",
    )
    fake.reset()
    expect("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount(), 4)
    expect("driver version", pynvml.nvmlSystemGetDriverVersion(), "570.1.2")
    expect("NVML version", pynvml.nvmlSystemGetNVMLVersion(), "13.570.1.2")
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    expect(
        "names",
        [pynvml.nvmlDeviceGetName(h) for h in hs],
        [
            "NVIDIA H100 80GB HBM3",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA A100-SXM4-80GB",
        ],
    )
    expect("minors", [pynvml.nvmlDeviceGetMinorNumber(h) for h in hs], [3, 1, 2, 0])
    expect_error(
        "GPU 0 power", pynvml.NVMLError_NotSupported, lambda: pynvml.nvmlDeviceGetPowerUsage(hs[0])
    )
    expect_error(
        "GPU 2 vbios (*:vbios)",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetVbiosVersion(hs[2]),
    )
    expect(
        "GPU 3 memtemp per-field rc", pynvml.nvmlDeviceGetFieldValues(hs[3], [82])[0].nvmlReturn, 3
    )
    expect(
        "MIG modes", [pynvml.nvmlDeviceGetMigMode(h) for h in hs], [[0, 0], [1, 1], [0, 0], [1, 1]]
    )
    expect(
        "max MIG device counts",
        [pynvml.nvmlDeviceGetMaxMigDeviceCount(h) for h in hs],
        [0, 7, 0, 7],
    )

    section("GPU 1 MIG devices (1:9 = 3g.40gb, 2:19 = 1g.10gb)")
    parent = hs[1]
    migs = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, k) for k in range(2)]
    expect_error(
        "nvmlDeviceGetMigDeviceHandleByIndex(2)",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 2),
    )
    expect("distinct handles", len({addr(m) for m in migs} | {addr(parent)}), 3)
    for mig, (gi, mb) in zip(migs, [(1, 40192), (2, 9984)], strict=True):
        expect(
            f"gi {gi}: nvmlDeviceIsMigDeviceHandle",
            pynvml.nvmlDeviceIsMigDeviceHandle(mig).value,
            1,
        )
        expect(f"gi {gi}: nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId(mig), gi)
        expect(
            f"gi {gi}: nvmlDeviceGetComputeInstanceId",
            pynvml.nvmlDeviceGetComputeInstanceId(mig),
            0,
        )
        uuid = pynvml.nvmlDeviceGetUUID(mig)
        expect(f"gi {gi}: nvmlDeviceGetUUID", uuid, f"MIG-fa4e0001-{gi:04x}-5000-8000-000000000000")
        expect(
            f"gi {gi}: nvmlDeviceGetHandleByUUID(MIG uuid)",
            addr(pynvml.nvmlDeviceGetHandleByUUID(uuid)),
            addr(mig),
        )
        expect(
            f"gi {gi}: nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
            addr(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)),
            addr(parent),
        )
        expect(
            f"gi {gi}: nvmlDeviceGetName", pynvml.nvmlDeviceGetName(mig), "NVIDIA A100-SXM4-80GB"
        )
        m2 = pynvml.nvmlDeviceGetMemoryInfo(mig, version=pynvml.nvmlMemory_v2)
        expect(
            f"gi {gi}: memory v2 total/reserved/used/free",
            (m2.total, m2.reserved, m2.used, m2.free),
            (mb * MIB, 0, 100 * gi * MIB, (mb - 100 * gi) * MIB),
        )
        m1 = pynvml.nvmlDeviceGetMemoryInfo(mig)
        expect(
            f"gi {gi}: memory v1 total/used/free",
            (m1.total, m1.used, m1.free),
            (mb * MIB, 100 * gi * MIB, (mb - 100 * gi) * MIB),
        )
        attrs = pynvml.nvmlDeviceGetAttributes(mig)
        expect(
            f"gi {gi}: nvmlDeviceGetAttributes_v2 slices/memorySizeMB",
            (attrs.gpuInstanceSliceCount, attrs.memorySizeMB),
            (3 if gi == 1 else 1, mb),
        )
        expect(
            f"gi {gi}: processes on MIG handle",
            pynvml.nvmlDeviceGetComputeRunningProcesses(mig),
            [],
        )
        expect_error(
            f"gi {gi}: nvmlDeviceGetProcessUtilization",
            pynvml.NVMLError_NotSupported,
            lambda: pynvml.nvmlDeviceGetProcessUtilization(mig, 0),  # noqa: B023
        )
        for label, call in [
            ("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates),
            ("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage),
            ("nvmlDeviceGetTemperature", lambda d: pynvml.nvmlDeviceGetTemperature(d, 0)),
            ("nvmlDeviceGetClockInfo", lambda d: pynvml.nvmlDeviceGetClockInfo(d, 0)),
            ("nvmlDeviceGetFieldValues", lambda d: pynvml.nvmlDeviceGetFieldValues(d, [82])),
            ("nvmlDeviceGetIndex", pynvml.nvmlDeviceGetIndex),
        ]:
            expect_error(f"gi {gi}: {label}", pynvml.NVMLError_NotSupported, bind(call, mig))
    expect_error(
        "nvmlDeviceGetMigDeviceHandleByIndex(MIG handle, 0)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(migs[0], 0),
    )

    expect_error(
        "nvmlDeviceGetProcessUtilization on a GPU in MIG mode",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetProcessUtilization(parent, 0),
    )

    section("GPU 1 GPU instances and profiles")
    for gi, prof, start, size in [(1, 9, 0, 3), (2, 19, 3, 1)]:
        inst = pynvml.nvmlDeviceGetGpuInstanceById(parent, gi)
        info = pynvml.nvmlGpuInstanceGetInfo(inst)
        expect(
            f"nvmlGpuInstanceGetInfo(gi {gi}) device/id/profileId/placement",
            (addr(info.device), info.id, info.profileId, info.placement.start, info.placement.size),
            (addr(parent), gi, prof, start, size),
        )
    expect_error(
        "nvmlDeviceGetGpuInstanceById(5)",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetGpuInstanceById(parent, 5),
    )
    table = [
        (19, "MIG 1g.10gb", 1, 9984),
        (14, "MIG 2g.20gb", 2, 20096),
        (9, "MIG 3g.40gb", 3, 40192),
        (5, "MIG 4g.40gb", 4, 40192),
        (0, "MIG 7g.80gb", 7, 80896),
    ]
    for enum, (pid, name, slices, mb) in enumerate(table):
        p = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, enum)
        expect(
            f"nvmlDeviceGetGpuInstanceProfileInfoV(enum {enum})",
            (p.version, p.id, p.name, p.sliceCount, p.memorySizeMB),
            (pynvml.nvmlGpuInstanceProfileInfo_v2, pid, name, slices, mb),
        )
        q = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(parent, pid)
        expect(f"nvmlDeviceGetGpuInstanceProfileInfoByIdV(id {pid})", (q.id, q.name), (pid, name))
    v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, 2, version=1)
    expect("nvmlDeviceGetGpuInstanceProfileInfo v1 (enum 2)", (v1.id, v1.sliceCount), (9, 3))
    expect_error(
        "profile enum 5",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, 5),
    )
    expect_error(
        "profile id 15",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(parent, 15),
    )
    bad = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    bad.version = 0x01000098
    expect(
        "raw nvmlDeviceGetGpuInstanceProfileInfoV with version 1 rc",
        pynvml.nvmlLib.nvmlDeviceGetGpuInstanceProfileInfoV(parent, 0, ctypes.byref(bad)),
        25,
    )
    expect_error(
        "GPU 3 (MIG on, no instances) handle 0",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(hs[3], 0),
    )

    section("lost GPUs (runtime)")
    fake.set_lost(1)
    expect_error(
        "nvmlDeviceGetHandleByIndex(1)",
        pynvml.NVMLError_GpuIsLost,
        lambda: pynvml.nvmlDeviceGetHandleByIndex(1),
    )
    expect_error(
        "old handle: nvmlDeviceGetUUID",
        pynvml.NVMLError_GpuIsLost,
        lambda: pynvml.nvmlDeviceGetUUID(parent),
    )
    expect_error(
        "MIG handle of lost parent",
        pynvml.NVMLError_GpuIsLost,
        lambda: pynvml.nvmlDeviceGetMemoryInfo(migs[0]),
    )
    expect_error(
        "nvmlDeviceGetHandleByUUID(lost)",
        pynvml.NVMLError_GpuIsLost,
        lambda: pynvml.nvmlDeviceGetHandleByUUID("GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"),
    )
    expect("str(NVMLError_GpuIsLost)", str(pynvml.NVMLError(15)), "GPU is lost")
    expect("nvmlDeviceGetCount still 4", pynvml.nvmlDeviceGetCount(), 4)
    fake.set_lost(1, False)
    expect(
        "back: nvmlDeviceGetUUID",
        pynvml.nvmlDeviceGetUUID(parent),
        "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c",
    )

    section("MIG reconfigured at run time")
    fake.set_mig(1, "2:19,4:14")
    expect_error(
        "stale MIG handle (gi 1 removed)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetUUID(migs[0]),
    )
    expect("surviving MIG handle (gi 2)", pynvml.nvmlDeviceGetGpuInstanceId(migs[1]), 2)
    new = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    expect("new instance 1 is gi 4", pynvml.nvmlDeviceGetGpuInstanceId(new), 4)
    fake.set_mig(0, [(7, 0)])
    h0 = hs[0]
    expect("GPU 0 now in MIG mode", pynvml.nvmlDeviceGetMigMode(h0), [1, 1])
    expect(
        "GPU 0 name unchanged (decided at reset)",
        pynvml.nvmlDeviceGetName(h0),
        "NVIDIA H100 80GB HBM3",
    )
    expect(
        "GPU 0 gi 7 memory total",
        pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h0, 0)).total,
        80896 * MIB,
    )
    fake.set_mig(1, None)
    expect("GPU 1 MIG off", pynvml.nvmlDeviceGetMigMode(parent), [0, 0])
    expect_error("set_mig bad profile", ValueError, lambda: fake.set_mig(1, "1:77"))
    expect_error("set_mig duplicate gi", ValueError, lambda: fake.set_mig(1, "1:19,1:19"))
    expect_error("set_mig garbage", ValueError, lambda: fake.set_mig(1, "x"))

    section("environment: lost GPU 2")
    set_env(GPU_COUNT="3", LOST="2")
    fake.reset()
    expect_error(
        "nvmlDeviceGetHandleByIndex(2)",
        pynvml.NVMLError_GpuIsLost,
        lambda: pynvml.nvmlDeviceGetHandleByIndex(2),
    )
    expect_error(
        "handle from before reset: power",
        pynvml.NVMLError_GpuIsLost,
        lambda: pynvml.nvmlDeviceGetPowerUsage(hs[2]),
    )
    expect_error(
        "handle of GPU 3 (count now 3)",
        pynvml.NVMLError_InvalidArgument,
        lambda: pynvml.nvmlDeviceGetPowerUsage(hs[3]),
    )


def check_processes(fake: FakeNvml) -> None:
    section("processes: FAKE_NVML_PROCESSES, kinds, MIG attribution, utilization")
    set_env(
        GPU_COUNT="3",
        MIG="2=1:9,2:19",
        PROCESSES="0=100:512::90:30,101:64::::g,102:-::40::b;1=;2=200:10:1,201:20:~2,202:30",
    )
    fake.reset()
    pynvml.nvmlInit()
    h0, h1, h2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    none = 0xFFFFFFFF
    expect(
        "GPU 0 compute (c, b; '-' MiB -> None)",
        procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h0),
        [(100, 512 * MIB, none, none), (102, None, none, none)],
    )
    expect(
        "GPU 0 graphics (g, b)",
        procs(pynvml.nvmlDeviceGetGraphicsRunningProcesses, h0),
        [(101, 64 * MIB, none, none), (102, None, none, none)],
    )
    expect("GPU 1 (IDX= : none)", procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h1), [])
    expect(
        "GPU 2 (MIG) parent: gi 1, ~2 hidden, none",
        procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h2),
        [(200, 10 * MIB, 1, 0), (201, 20 * MIB, none, none), (202, 30 * MIB, none, none)],
    )
    for k, want in enumerate([[(200, 10 * MIB, 1, 0)], [(201, 20 * MIB, 2, 0)]]):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h2, k)
        expect(f"GPU 2 MIG handle {k}: its GI only",
               procs(pynvml.nvmlDeviceGetComputeRunningProcesses, mig), want)
    expect_error(
        "GPU 2 (MIG mode) nvmlDeviceGetProcessUtilization",
        pynvml.NVMLError_NotSupported,
        lambda: pynvml.nvmlDeviceGetProcessUtilization(h2, 0),
    )

    first = pynvml.nvmlDeviceGetProcessUtilization(h0, 0)
    expect("GPU 0 utilization since 0 (pid, sm, mem; no MEM = 0)",
           [(u.pid, u.smUtil, u.memUtil) for u in first], [(100, 90, 30), (102, 40, 0)])
    newest = max(u.timeStamp for u in first)
    expect("  real-time microsecond stamps, newest first",
           (newest > 1_600_000_000_000_000, first[0].timeStamp > first[1].timeStamp), (True, True))
    expect("proc_util_stamps(0) after it", fake.proc_util_stamps(0), (0, newest))
    second = pynvml.nvmlDeviceGetProcessUtilization(h0, newest)
    expect("  since the newest stamp: new samples only",
           all(u.timeStamp > newest for u in second) and len(second) == 2, True)
    expect("proc_util_stamps(0) now", fake.proc_util_stamps(0)[0], newest)
    expect_error(
        "  since a future stamp: NOT_FOUND",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetProcessUtilization(h0, 1 << 62),
    )
    expect_error(
        "GPU 1 (no processes): NOT_FOUND",
        pynvml.NVMLError_NotFound,
        lambda: pynvml.nvmlDeviceGetProcessUtilization(h1, 0),
    )
    count = ctypes.c_uint(0)
    expect(
        "raw size query (NULL, count 0) rc / count",
        (pynvml.nvmlLib.nvmlDeviceGetProcessUtilization(h0, None, ctypes.byref(count),
                                                        ctypes.c_ulonglong(0)), count.value),
        (7, 2),
    )
    expect("calls(nvmlDeviceGetProcessUtilization)",
           fake.calls("nvmlDeviceGetProcessUtilization"), 8)

    section("MPS clients: kinds m and M, key mps")
    fake.set_processes(1, "10:100,11:200::::m,12:300::50::M")
    mps = [(11, 200 * MIB, none, none), (12, 300 * MIB, none, none)]
    expect("GPU 1 MPS v3 (m, M)", procs(pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3, h1), mps)
    expect("GPU 1 MPS v2", procs(pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v2, h1), mps)
    expect("GPU 1 compute (c, M)",
           [p[0] for p in procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h1)], [10, 12])
    fake.set_not_supported(1, "mps")
    expect_error("key mps: NOT_SUPPORTED", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(h1))
    expect("  compute list still answers",
           len(procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h1)), 2)
    fake.set_not_supported(1, "mps", False)

    section("processes set at run time")
    fake.set_processes(1, [(7, 128, None, 55, 5), FakeProcess(8, 1, sm_percent=3, kind="b")])
    expect("GPU 1 compute", procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h1),
           [(7, 128 * MIB, none, none), (8, MIB, none, none)])
    expect("GPU 1 graphics", procs(pynvml.nvmlDeviceGetGraphicsRunningProcesses, h1),
           [(8, MIB, none, none)])
    expect("GPU 1 utilization", util_samples(h1, 0), [(7, 55, 5), (8, 3, 0)])
    fake.set_processes(0, "300:1::1")
    expect("string spec", util_samples(h0, 0), [(300, 1, 0)])
    fake.set_processes(0, [])
    expect("[]: no processes", procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h0), [])
    fake.set_processes(0, None)
    expect("None: back to FAKE_NVML_PROCESSES",
           [p[0] for p in procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h0)], [100, 102])
    fake.set_processes(2, [FakeProcess(9, gpu_instance_id=2, hide_gi=True)])
    expect("hide_gi", procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h2),
           [(9, 256 * MIB, none, none)])
    fake.set_mig(2, None)
    fake.set_processes(2, [FakeProcess(9, gpu_instance_id=2)])
    expect("GI not reported out of MIG mode",
           procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h2), [(9, 256 * MIB, none, none)])
    for bad in ["x", "1", "1:2:64", "1:2:~", "1:2::101", "1:2:::-:z", "1:2,1:3",
                "1:2:3:4:5:c:7", ",".join(f"{n}:1" for n in range(17))]:
        expect_error(f"set_processes({bad[:20]!r})", ValueError,
                     lambda: fake.set_processes(0, bad))  # noqa: B023
    expect_error("hide_gi without a GI", ValueError,
                 lambda: fake.set_processes(0, [FakeProcess(1, hide_gi=True)]))
    fake.reset()
    expect("reset clears stamps and overrides",
           (fake.proc_util_stamps(0), len(procs(pynvml.nvmlDeviceGetComputeRunningProcesses, h1))),
           ((0, 0), 0))
    pynvml.nvmlShutdown()


def check_events(fake: FakeNvml) -> None:
    section("event sets: XIDs")
    xid = pynvml.nvmlEventTypeXidCriticalError
    set_env(GPU_COUNT="2", XIDS="1:31,1:43")
    fake.reset()
    expect_error("nvmlEventSetCreate before init", pynvml.NVMLError_Uninitialized,
                 pynvml.nvmlEventSetCreate)
    pynvml.nvmlInit()
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    expect("supported event types (an H100's)", hex(pynvml.nvmlDeviceGetSupportedEventTypes(h0)),
           "0xff9f")
    es = pynvml.nvmlEventSetCreate()
    expect("event_sets()", fake.event_sets(), 1)
    t0 = time.monotonic()
    expect_error("idle wait: TIMEOUT", pynvml.NVMLError_Timeout,
                 lambda: pynvml.nvmlEventSetWait_v2(es, 100))
    expect("waited ~100 ms", 0.09 <= time.monotonic() - t0 < 0.5, True)
    pynvml.nvmlDeviceRegisterEvents(h0, xid, es)
    expect("inject_xid(0, 79) reaches 1 set", fake.inject_xid(0, 79), 1)
    expect("inject on an unregistered GPU: dropped", fake.inject_xid(1, 13), 0)
    data = pynvml.nvmlEventSetWait_v2(es, 0)
    expect("event (type, data, gi, ci)",
           (data.eventType, data.eventData, data.gpuInstanceId, data.computeInstanceId),
           (xid, 79, 0xFFFFFFFF, 0xFFFFFFFF))
    expect("event device = the GPU's handle", addr(data.device) == addr(h0), True)
    pynvml.nvmlDeviceRegisterEvents(h1, xid, es)
    expect("FAKE_NVML_XIDS queued at registration",
           [pynvml.nvmlEventSetWait_v2(es, 0).eventData for _ in range(2)], [31, 43])
    expect("event_registrations(1)", fake.event_registrations(1), 1)

    def later(delay: float, fn: Callable[[], object]) -> None:
        threading.Timer(delay, fn).start()

    later(0.1, lambda: fake.inject_xid(1, 48))
    t0 = time.monotonic()
    data = pynvml.nvmlEventSetWait_v2(es, 5000)
    expect("a blocked waiter wakes for an injected XID",
           (data.eventData, time.monotonic() - t0 < 1.0), (48, True))
    later(0.1, lambda: fake.set_lost(1))
    expect_error("GPU lost during a wait: GPU_IS_LOST", pynvml.NVMLError_GpuIsLost,
                 lambda: pynvml.nvmlEventSetWait_v2(es, 5000))
    expect_error("register a lost GPU", pynvml.NVMLError_GpuIsLost,
                 lambda: pynvml.nvmlDeviceRegisterEvents(h1, xid, es))
    fake.set_lost(1, False)
    fake.set_event_types(1, 0x7)
    expect_error("register XIDs where unsupported", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceRegisterEvents(h1, xid, es))
    fake.set_event_types(1, 0)
    expect_error("no event types at all", pynvml.NVMLError_NotSupported,
                 lambda: pynvml.nvmlDeviceGetSupportedEventTypes(h1))
    fake.set_event_types(1, None)
    expect_error("inject a non-bit type", ValueError, lambda: fake.inject_event(0, 0x3, 1))
    expect_error("register into a bad set", pynvml.NVMLError_InvalidArgument,
                 lambda: pynvml.nvmlDeviceRegisterEvents(h0, xid, None))
    later(0.1, pynvml.nvmlShutdown)
    expect_error("shutdown during a wait: UNINITIALIZED", pynvml.NVMLError_Uninitialized,
                 lambda: pynvml.nvmlEventSetWait_v2(es, 5000))
    expect("the session's sets are gone", fake.event_sets(), 0)
    pynvml.nvmlInit()
    expect_error("the old set in a new session: INVALID_ARGUMENT",
                 pynvml.NVMLError_InvalidArgument, lambda: pynvml.nvmlEventSetWait_v2(es, 0))
    es2 = pynvml.nvmlEventSetCreate()
    expect("a new set is a new handle", addr(es2) != addr(es), True)
    pynvml.nvmlEventSetFree(es2)
    expect_error("free twice", pynvml.NVMLError_InvalidArgument,
                 lambda: pynvml.nvmlEventSetFree(es2))
    expect("calls(nvmlEventSetWait_v2)", fake.calls("nvmlEventSetWait_v2"), 8)
    set_env(XIDS="0:x")
    expect_error("reset() with FAKE_NVML_XIDS=0:x", ValueError, fake.reset)
    set_env()
    fake.reset()
    pynvml.nvmlShutdown()


def check_init_and_errors(fake: FakeNvml) -> None:
    section("refcount, shutdown, init errors, bad configuration")
    set_env()
    fake.reset()
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    expect("refcount after 2 nvmlInit", fake.init_refcount(), 2)
    pynvml.nvmlShutdown()
    pynvml.nvmlShutdown()
    expect("refcount after 2 shutdowns", fake.init_refcount(), 0)
    expect_error(
        "device call after shutdown",
        pynvml.NVMLError_Uninitialized,
        lambda: pynvml.nvmlDeviceGetHandleByIndex(0),
    )
    expect_error(
        "driver version after shutdown",
        pynvml.NVMLError_Uninitialized,
        pynvml.nvmlSystemGetDriverVersion,
    )
    expect_error("extra nvmlShutdown", pynvml.NVMLError_Uninitialized, pynvml.nvmlShutdown)
    fake.lib.nvmlInit_v2.restype = ctypes.c_int
    expect("raw nvmlInit_v2 rc", fake.lib.nvmlInit_v2(), 0)
    expect("raw nvmlShutdown rc", fake.lib.nvmlShutdown(), 0)

    set_env(INIT_ERROR="9")
    fake.reset()
    expect_error("FAKE_NVML_INIT_ERROR=9", pynvml.NVMLError_DriverNotLoaded, pynvml.nvmlInit)
    set_env(MIG="0=1:77")
    expect_error("reset() with FAKE_NVML_MIG=0=1:77", ValueError, fake.reset)
    expect_error("nvmlInit with bad env", pynvml.NVMLError_Unknown, pynvml.nvmlInit)
    for name, value in [
        ("GPU_COUNT", "x"),
        ("GPU_COUNT", "65"),
        ("LOST", "1,,2"),
        ("NOT_SUPPORTED", "0:nope"),
        ("MINOR", "0=1"),
        ("MIG", "1=1:9,1:19"),
        ("DEVICE_DELAY_US", "-1"),
        ("INIT_ERROR", "abc"),
        ("PROCESSES", "0=1"),
        ("PROCESSES", "0=1:2:3:101"),
        ("PROCESSES", "64=1:2"),
    ]:
        set_env(**{name: value})
        expect_error(f"reset() with FAKE_NVML_{name}={value}", ValueError, fake.reset)
    set_env()
    fake.reset()
    expect("refcount stays 0 after failed inits", fake.init_refcount(), 0)


def check_delay_and_threads(fake: FakeNvml) -> None:
    section("FAKE_NVML_DEVICE_DELAY_US and threads")
    set_env(DEVICE_DELAY_US="50000")
    fake.reset()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    result: list[float] = []

    def worker() -> None:
        t0 = time.perf_counter()
        pynvml.nvmlDeviceGetPowerUsage(h)
        result.append(time.perf_counter() - t0)

    thread = threading.Thread(target=worker)
    thread.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    fake.set_not_supported(1, "power")  # control call is not blocked by the sleep
    control_s = time.perf_counter() - t0
    thread.join()
    expect("slow device call took >= 50 ms", result[0] >= 0.05, True)
    expect("control call during it took < 20 ms", control_s < 0.02, True)
    t0 = time.perf_counter()
    pynvml.nvmlSystemGetDriverVersion()
    expect("system call not delayed (< 20 ms)", time.perf_counter() - t0 < 0.02, True)

    set_env()
    fake.reset()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            with contextlib.suppress(pynvml.NVMLError_GpuIsLost):
                pynvml.nvmlDeviceGetPowerUsage(h)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for k in range(200):
        fake.set_lost(0, k % 2 == 0)
    stop.set()
    for t in threads:
        t.join()
    show(
        "4 threads x power while toggling lost 200 times: calls",
        fake.calls("nvmlDeviceGetPowerUsage"),
    )
    fake.set_lost(0, False)
    pynvml.nvmlShutdown()


def check_hang_file(fake: FakeNvml) -> None:
    section("FAKE_NVML_HANG_FILE")
    with tempfile.TemporaryDirectory() as tmp:
        hang = os.path.join(tmp, "hang")
        set_env(HANG_FILE=hang)
        fake.reset()
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        t0 = time.perf_counter()
        pynvml.nvmlDeviceGetPowerUsage(h)
        expect("no file: not blocked (< 20 ms)", time.perf_counter() - t0 < 0.02, True)
        open(hang, "w").close()
        done = threading.Event()
        thread = threading.Thread(target=lambda: (pynvml.nvmlDeviceGetPowerUsage(h), done.set()))
        thread.start()
        expect("blocked while the file exists", done.wait(0.2), False)
        t0 = time.perf_counter()
        pynvml.nvmlSystemGetDriverVersion()
        expect("system call not blocked (< 20 ms)", time.perf_counter() - t0 < 0.02, True)
        os.unlink(hang)
        expect("ends once the file is removed", done.wait(1.0), True)
        thread.join()
    set_env()
    fake.reset()
    pynvml.nvmlShutdown()


def thread_cpu_ms(fn: Callable[[], object]) -> float:
    t0 = time.thread_time()
    fn()
    return (time.thread_time() - t0) * 1e3


def check_cost_profile(fake: FakeNvml) -> None:
    section("FAKE_NVML_COST_PROFILE (CPU burnt per call, real-gpu-h100.md)")
    set_env(GPM="0")
    fake.reset()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)

    def energy() -> object:
        return pynvml.nvmlDeviceGetTotalEnergyConsumption(h)

    def temp() -> object:
        return pynvml.nvmlDeviceGetTemperature(h, 0)

    expect("profile off by default", fake.cost_profile(), None)
    expect("off: energy < 1 ms thread CPU", thread_cpu_ms(energy) < 1.0, True)
    expect("off: temperature < 1 ms thread CPU", thread_cpu_ms(temp) < 1.0, True)
    expect("off: cost_us(energy)", fake.cost_us("nvmlDeviceGetTotalEnergyConsumption"), 0)
    expect("off: nothing counted in cpu_ns", fake.total_cpu_ns(), 0)

    set_env(GPM="0", COST_PROFILE="h100")
    fake.reset()
    expect("FAKE_NVML_COST_PROFILE=h100", fake.cost_profile(), "h100")
    ms = thread_cpu_ms(energy)
    show("on: energy thread CPU ms", f"{ms:.3f}")
    expect("on: energy >= 3 ms thread CPU", ms >= 3.0, True)
    ms = thread_cpu_ms(temp)
    show("on: temperature thread CPU ms", f"{ms:.3f}")
    expect("on: temperature < 1 ms thread CPU", ms < 1.0, True)
    expect("on: cpu_ns(energy) >= 3.9 ms",
           fake.cpu_ns("nvmlDeviceGetTotalEnergyConsumption") >= 3_900_000, True)
    expect("on: cpu_ns(temperature) >= 5 us",
           fake.cpu_ns("nvmlDeviceGetTemperature") >= 5_000, True)
    expect("on: cost table",
           [fake.cost_us(s) for s in ("nvmlDeviceGetTotalEnergyConsumption",
                                      "nvmlGpmMetricsGet", "nvmlDeviceGetMigMode",
                                      "nvmlDeviceGetPcieReplayCounter", "nvmlGpmSampleGet",
                                      "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetUUID",
                                      "nvmlDeviceGetTemperature", "nvmlDeviceGetFieldValues",
                                      "nvmlInit_v2")],
           [3900, 1300, 150, 145, 37, 10, 8, 5, 10, 0])
    expect("on: cost of violation status, power limit, licence, inforom, fan",
           [fake.cost_us(s) for s in ("nvmlDeviceGetViolationStatus",
                                      "nvmlDeviceGetPowerManagementLimit",
                                      "nvmlDeviceGetGridLicensableFeatures_v4",
                                      "nvmlDeviceGetInforomVersion", "nvmlDeviceGetFanSpeed")],
           [700, 180, 180, 8, 5])
    ms = thread_cpu_ms(lambda: pynvml.nvmlDeviceGetViolationStatus(h, 0))
    show("on: ViolationStatus thread CPU ms", f"{ms:.3f}")
    expect("on: ViolationStatus >= 0.6 ms", ms >= 0.6, True)
    expect("on: field costs 83, 94, 3",
           [fake.field_cost_us(f) for f in (83, 94, 3)], [3900, 145, 0])
    ms = thread_cpu_ms(lambda: pynvml.nvmlDeviceGetFieldValues(h, [82, 83, 94]))
    show("on: FieldValues[82,83,94] thread CPU ms", f"{ms:.3f}")
    expect("on: FieldValues with 83 >= 3 ms (batching does not hide it)", ms >= 3.0, True)
    ms = thread_cpu_ms(lambda: pynvml.nvmlDeviceGetFieldValues(h, [3, 4, 5, 6]))
    expect("on: FieldValues[3,4,5,6] < 1 ms", ms < 1.0, True)
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    pynvml.nvmlGpmSampleGet(h, s2)
    ms = thread_cpu_ms(lambda: pynvml.nvmlGpmMetricsGet(_gpm_request(s1, s2, [1, 2])))
    show("on: GpmMetricsGet thread CPU ms", f"{ms:.3f}")
    expect("on: GpmMetricsGet >= 1 ms", ms >= 1.0, True)
    pynvml.nvmlGpmSampleFree(s1)
    pynvml.nvmlGpmSampleFree(s2)

    # The busy-wait runs outside the library's lock: control calls do not wait for it.
    stop = threading.Event()

    def burner() -> None:
        while not stop.is_set():
            energy()

    thread = threading.Thread(target=burner)
    thread.start()
    time.sleep(0.01)
    waits = []
    for _ in range(50):
        t0 = time.perf_counter()
        fake.total_calls()
        waits.append(time.perf_counter() - t0)
        time.sleep(0.001)
    stop.set()
    thread.join()
    waits.sort()
    show("control call during energy calls, median ms", f"{waits[25] * 1e3:.3f}")
    expect("control call not held up by the busy-wait (median < 1 ms)", waits[25] < 1e-3, True)

    fake.set_cost_profile(None)
    expect("set_cost_profile(None)", fake.cost_profile(), None)
    expect("  energy fast again", thread_cpu_ms(energy) < 1.0, True)
    fake.set_cost_profile("h100")
    expect("set_cost_profile('h100')", fake.cost_profile(), "h100")
    expect("  energy >= 3 ms again", thread_cpu_ms(energy) >= 3.0, True)
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    expect("  the override survives nvmlInit", fake.cost_profile(), "h100")
    pynvml.nvmlShutdown()
    expect_error("set_cost_profile('a100')", ValueError,
                 lambda: fake.set_cost_profile("a100"))  # type: ignore[arg-type]
    set_env()
    fake.reset()
    expect("reset() drops the override", fake.cost_profile(), None)
    expect("reset() zeroes cpu_ns", fake.total_cpu_ns(), 0)
    set_env(COST_PROFILE="h200")
    expect_error("reset() with FAKE_NVML_COST_PROFILE=h200", ValueError, fake.reset)
    set_env(COST_PROFILE="")
    fake.reset()
    expect("FAKE_NVML_COST_PROFILE= (empty): off", fake.cost_profile(), None)
    set_env()
    fake.reset()


def _gpm_request(s1: Any, s2: Any, ids: list[int]) -> Any:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(ids)
    request.sample1 = s1
    request.sample2 = s2
    for slot, metric_id in enumerate(ids):
        request.metrics[slot].metricId = metric_id
    return request


SUBPROCESS_SCRIPT = textwrap.dedent(
    """
    import pynvml
    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    print("count", n)
    for i in (0, 2):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        print(i, pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h),
              pynvml.nvmlDeviceGetMigMode(h), pynvml.nvmlDeviceGetPowerUsage(h))
    try:
        pynvml.nvmlDeviceGetHandleByIndex(1)
    except pynvml.NVMLError as e:
        print("error", type(e).__name__, e)
    print("maps", any("{dir}" in line and "libnvidia-ml.so.1" in line
                      for line in open("/proc/self/maps")))
    pynvml.nvmlShutdown()
    """
)


def check_subprocess(lib_dir: Path) -> None:
    section("subprocess with LD_LIBRARY_PATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.update(
        LD_LIBRARY_PATH=str(lib_dir),
        FAKE_NVML_GPU_COUNT="3",
        FAKE_NVML_LOST="1",
        FAKE_NVML_MIG="2=1:0",
    )
    script = SUBPROCESS_SCRIPT.replace("{dir}", str(lib_dir))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    for line in proc.stdout.splitlines():
        show("child:", line)
    expect("child exit status", proc.returncode, 0)
    expect(
        "child output",
        proc.stdout.splitlines(),
        [
            "count 3",
            "0 NVIDIA H100 80GB HBM3 GPU-fa4e0000-7953-256e-8f33-1343419b1a1c [0, 0] 16365",
            "2 NVIDIA A100-SXM4-80GB GPU-fa4e0002-7953-256e-8f33-1343419b1a1c [1, 1] 18365",
            "error NVMLError_GpuIsLost GPU is lost",
            "maps True",
        ],
    )
    if proc.stderr:
        print(proc.stderr)

    env.pop("LD_LIBRARY_PATH")
    proc = subprocess.run(
        [sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    last = (proc.stderr.strip().splitlines() or ["(no error)"])[-1]
    show("child without LD_LIBRARY_PATH (no real driver here):", last)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="fake-nvml-") as tmp:
        lib_dir = Path(tmp)
        t0 = time.perf_counter()
        path = build_fake_nvml(lib_dir)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = build_fake_nvml(lib_dir)
        cached_s = time.perf_counter() - t0
        print(
            f"built {path} in {build_s:.2f} s; second call {cached_s * 1000:.1f} ms "
            f"(cached: {sorted(p.name for p in lib_dir.iterdir())})"
        )
        assert again == path
        set_env()
        fake = FakeNvml(path)
        fake.reset()
        check_defaults(fake)
        check_not_supported_keys(fake)
        check_env_config(fake)
        pynvml.nvmlShutdown()
        check_processes(fake)
        check_events(fake)
        check_init_and_errors(fake)
        check_delay_and_threads(fake)
        check_hang_file(fake)
        check_cost_profile(fake)
        check_subprocess(lib_dir)
    print()
    if FAILURES:
        print(f"{len(FAILURES)} FAILED: {', '.join(FAILURES)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
