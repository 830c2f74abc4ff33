"""Reloading dcgm-exporter's config file (issue 24), through ConfigReloader and the real files:
changed watch groups are handed to the collector at once, the CSV that `metrics.file` names is
watched and follows a change of the name, a changed `collection.interval` is logged once as
needing a restart, and a wrong file keeps everything."""

import logging
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpu_enricher.fields.collection import CountersSources, load_collection
from gpu_enricher.fields.counters import CounterLine
from gpu_enricher.reload import ConfigReloader

TEMP = "DCGM_FI_DEV_GPU_TEMP"
CONFIG = """\
version: 1
metrics:
  file: {csv}
collection:
  interval: {interval}
  watchGroups:
    - {{name: temperature, interval: {group}, fields: [{field}]}}
"""


class Recorder:
    """Stands in for the collector: what the reloader hands it."""

    def __init__(self) -> None:
        self.used: list[tuple[list[str], dict[str, int]]] = []

    def use_counters(self, counters: tuple[CounterLine, ...],
                     field_intervals_ms: Mapping[str, int]) -> None:
        self.used.append(([line.field for line in counters], dict(field_intervals_ms)))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "a.csv").write_text(f"{TEMP}, gauge, t\n")
    (tmp_path / "b.csv").write_text(f"{TEMP}, gauge, t\nDCGM_FI_DEV_SM_CLOCK, gauge, c\n")
    return tmp_path


def write(folder: Path, csv: str = "a.csv", interval: str = "1s", group: str = "1m",
          field: str = TEMP) -> None:
    (folder / "config.yaml").write_text(CONFIG.format(csv=csv, interval=interval, group=group,
                                                      field=field))


async def test_watch_groups_metrics_file_and_interval_on_reload(
        folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(folder)
    sources = CountersSources(config_file=folder / "config.yaml", image_dir=folder)
    collector = Recorder()
    reloader = ConfigReloader(collector, sources, load_collection(sources),  # type: ignore[arg-type]
                              None, 0, interval_ms=1000)
    assert set(reloader._paths()) == {folder / "config.yaml", folder / "a.csv"}
    write(folder, group="2m")
    await reloader.reload("test")
    assert collector.used == [([TEMP], {TEMP: 120_000})]
    write(folder, csv="b.csv", group="2m")  # another CSV: read, and watched from now on
    await reloader.reload("test")
    assert collector.used[-1] == ([TEMP, "DCGM_FI_DEV_SM_CLOCK"], {TEMP: 120_000})
    assert set(reloader._paths()) == {folder / "config.yaml", folder / "b.csv"}
    caplog.set_level(logging.WARNING)
    write(folder, csv="b.csv", group="2m", interval="2s")
    await reloader.reload("SIGHUP")
    await reloader.reload("SIGHUP")
    needs_restart = [r for r in caplog.records if "collection.interval is now 2000 ms" in
                     r.getMessage()]
    assert len(needs_restart) == 1, "said once"
    assert len(collector.used) == 2, "nothing else changed"
    write(folder, csv="b.csv", field="DCGM_FI_DEV_NVLINK_*")  # matches nothing: refused
    await reloader.reload("test")
    assert len(collector.used) == 2
    assert any("watch group 'temperature' matches none of the 2 counters in force"
               in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
