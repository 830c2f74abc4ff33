"""--dump-enabled, as dcgm-exporter's chart renders it (`debugDump.enabled`: `--dump-enabled
--dump-directory=… --dump-retention=… --dump-compression`): the real process writes each pass's
readings and devices to JSON files; old files are removed; a directory that cannot be written
is one WARNING and the passes go on."""

import asyncio
import gzip
import json
import logging
import os
import re
import time
from pathlib import Path

import pytest

from gpu_enricher.collector.dump import DumpSettings, PassDump
from gpu_enricher.model import DeviceIdentity, GpuSnapshot, NodeSnapshot
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture

NAME = re.compile(r"(metrics|deviceinfo)-GPU-\d{8}-\d{6}-[0-9a-f]{8}\.json(\.gz)?")


def test_the_charts_dump_arguments_write_each_passs_readings(
        exporters: list[Exporter], tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    exp = Exporter(["--simulate", "-c", "200", "--dump-enabled", f"--dump-directory={dumps}",
                    "--dump-retention=24", "--dump-compression"], {})
    exporters.append(exp)
    exp.wait_ready()
    deadline = time.monotonic() + 10
    while len(list(dumps.glob("deviceinfo-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    code, err = exp.stop()
    assert code == 0 and " WARNING " not in err and " ERROR " not in err, err
    files = sorted(dumps.iterdir())
    assert all(NAME.fullmatch(f.name) and f.name.endswith(".json.gz") for f in files), files
    metrics = [f for f in files if f.name.startswith("metrics-")]
    devices = [f for f in files if f.name.startswith("deviceinfo-")]
    assert len(metrics) >= 2 and len(devices) >= 2
    gathered = json.loads(gzip.decompress(metrics[-1].read_bytes()))
    listed = json.loads(gzip.decompress(devices[-1].read_bytes()))
    uuids = [g["identity"]["uuid"] for g in gathered["gpus"]]
    assert uuids and uuids == [d["uuid"] for d in listed]
    assert all("DCGM_FI_DEV_GPU_TEMP" in g["values"] for g in gathered["gpus"] if g["healthy"])
    assert f"writing each pass's readings to {dumps}" in err


def snapshot() -> NodeSnapshot:
    ident = DeviceIdentity(0, "GPU-0", "00000000:18:00.0", "NVIDIA H100 80GB HBM3", 0)
    return NodeSnapshot((GpuSnapshot(ident, values={"DCGM_FI_DEV_GPU_TEMP": 40}),), "580")


async def written(dump: PassDump) -> None:
    dump.offer(snapshot())
    await dump.close()


async def test_files_older_than_the_retention_are_removed(tmp_path: Path) -> None:
    old, fresh = tmp_path / "metrics-GPU-old.json", tmp_path / "metrics-GPU-fresh.json"
    for path in (old, fresh):
        path.write_text("{}")
    a_day_ago = time.time() - 25 * 3600
    os.utime(old, (a_day_ago, a_day_ago))
    await written(PassDump(DumpSettings(tmp_path, 24, compression=False),
                           cleanup_every_seconds=0))
    names = set(os.listdir(tmp_path))
    assert old.name not in names and fresh.name in names
    assert len([n for n in names if NAME.fullmatch(n) and n.endswith(".json")]) == 2
    # Retention 0 keeps every file.
    os.utime(fresh, (a_day_ago, a_day_ago))
    await written(PassDump(DumpSettings(tmp_path, 0, compression=False),
                           cleanup_every_seconds=0))
    assert fresh.exists()


async def test_a_directory_that_cannot_be_written_is_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory should be
    caplog.set_level(logging.DEBUG, logger="gpu_enricher")
    dump = PassDump(DumpSettings(blocked / "dumps", 24, compression=True))
    for _ in range(3):
        await written(dump)
    await asyncio.sleep(0)
    failures = [r for r in caplog.records if "cannot write the dump files" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
