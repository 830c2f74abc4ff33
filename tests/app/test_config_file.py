"""dcgm-exporter's config file as its Helm chart hands it over (`config.enabled`:
DCGM_EXPORTER_CONFIG_FILE=/etc/dcgm-exporter/config.yaml), on the real process against the fake
NVML library: watch groups, precedence, reload. (Each chart shape itself: test_manifests.py.)
"""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.manifests import Deployed, Manifest
from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture
from tests.samples import value
from tests.test_reload import dcgm_families, replace, wait_for

NODE = "gpu-node-1"
POWER = "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
CONFIG = """\
version: 1
metrics:
  fields:
    - name: DCGM_FI_DEV_SM_CLOCK
      prometheusType: gauge
      help: SM clock frequency (in MHz).
    - name: DCGM_FI_DEV_GPU_TEMP
      prometheusType: gauge
      help: GPU temperature (in C).
collection:
  interval: 1s
"""
# dcgm-exporter's chart 4.8.3 with config.enabled (no kubelet here: DCGM_EXPORTER_KUBERNETES
# left out).
CHART_ENV = {"DCGM_EXPORTER_LISTEN": ":9400", "NODE_NAME": NODE,
             "DCGM_EXPORTER_WEB_READ_TIMEOUT": "10s", "DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "30s",
             "DCGM_EXPORTER_CONFIG_FILE": "/etc/dcgm-exporter/config.yaml"}


@pytest.fixture
def image(tmp_path: Path) -> Iterator[Path]:
    """The container's /etc/dcgm-exporter, under the root manifests.py maps it into."""
    folder = tmp_path / "etc" / "dcgm-exporter"
    folder.mkdir(parents=True)
    yield folder


def start(exporters: list[Exporter], fake_nvml_path: Path, image: Path,
          **extra: str) -> Deployed:
    nvml = {"LD_LIBRARY_PATH": str(fake_nvml_path.parent), "FAKE_NVML_GPU_COUNT": "2"}
    exp = Deployed(Manifest({**CHART_ENV, **extra}), image.parents[1], nvml)
    exporters.append(exp)
    exp.wait_ready()
    return exp


def info_lines(exp: Exporter) -> list[str]:
    _, err = exp.stop()
    return [line.split(": ", 1)[1] for line in err.splitlines() if " INFO " in line]


def test_a_watch_group_on_nvml_repeats_the_value_between_its_reads(
        exporters: list[Exporter], fake_nvml_path: Path, image: Path) -> None:
    """SM_CLOCK in a 1-hour group is read on the first pass only; each GPU's series stays, with
    its value, on the passes in between."""
    (image / "config.yaml").write_text(CONFIG.replace("interval: 1s", "interval: 200ms") + (
        "  watchGroups:\n    - {name: clocks, interval: 1h, fields: ['DCGM_FI_DEV_SM_*']}\n"))
    exp = start(exporters, fake_nvml_path, image)
    seen = set()
    for _ in range(8):  # over several 200 ms passes
        body = get(exp.base + "/metrics")[1]
        seen.add((value(body, "DCGM_FI_DEV_SM_CLOCK", gpu="0"),
                  value(body, "DCGM_FI_DEV_SM_CLOCK", gpu="1")))
        time.sleep(0.2)
    assert len(seen) == 1 and None not in next(iter(seen)), seen
    assert exp.stop()[0] == 0


def test_an_explicit_interval_and_counters_beat_the_config_file(
        exporters: list[Exporter], fake_nvml_path: Path, image: Path) -> None:
    (image / "config.yaml").write_text(CONFIG)
    (image / "mine.csv").write_text(POWER)
    exp = start(exporters, fake_nvml_path, image, DCGM_EXPORTER_INTERVAL="2000",
                DCGM_EXPORTER_COLLECTORS="/etc/dcgm-exporter/mine.csv")
    assert dcgm_families(get(exp.base + "/metrics")[1]) == {"DCGM_FI_DEV_POWER_USAGE"}
    lines = info_lines(exp)
    assert any("every 2000 ms" in line for line in lines), lines


def test_a_changed_config_file_changes_the_metrics_without_a_restart(
        exporters: list[Exporter], fake_nvml_path: Path, image: Path) -> None:
    """As a ConfigMap update swaps the file: the next scrapes show the new list (upstream reads
    the file only at start); a wrong file keeps it."""
    config = image / "config.yaml"
    config.write_text(CONFIG)
    exp = start(exporters, fake_nvml_path, image)
    assert "DCGM_FI_DEV_POWER_USAGE" not in dcgm_families(get(exp.base + "/metrics")[1])
    replace(config, CONFIG.replace(
        "collection:", "    - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: W}\n"
        "collection:").replace("interval: 1s", "interval: 2s"))
    wait_for("the new metric", lambda: dcgm_families(get(exp.base + "/metrics")[1]) == {
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}, 20)
    replace(config, "version: 1\nmetrics: {fields: []}\n")  # wrong: the running list stays
    wait_for("the refusal", lambda: value(get(exp.base + "/metrics")[1],
                                          "gpu_enricher_config_reload_failures_total",
                                          file="config_file") == 1, 20)
    assert len(dcgm_families(get(exp.base + "/metrics")[1])) == 3
    _, err = exp.stop()
    assert f"{config}:2:19: metrics.fields: no fields: list at least one" in err
    # The interval sized the sources at start: a new one waits for a restart, said once.
    assert err.count("collection.interval is now 2000 ms; the running 1000 ms stays until a "
                     "restart") == 1, err


def test_simulated_node_with_a_watch_group(exporters: list[Exporter], tmp_path: Path) -> None:
    """`--simulate --config-file`: GPU_UTIL in a 1-hour watch group keeps its first reading
    while the power, read every 200 ms pass, moves with the simulated load."""
    config = tmp_path / "config.yaml"
    config.write_text("version: 1\nmetrics:\n  fields:\n"
                      "    - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gauge, help: u}\n"
                      "    - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: p}\n"
                      "collection:\n  interval: 200ms\n  watchGroups:\n"
                      "    - {name: slow, interval: 1h, fields: [DCGM_FI_DEV_GPU_UTIL]}\n")
    exp = Exporter(["--simulate", "--config-file", str(config)], {})
    exporters.append(exp)
    exp.wait_ready()
    utils, powers = set(), set()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        body = get(exp.base + "/metrics")[1]
        utils.add(value(body, "DCGM_FI_DEV_GPU_UTIL", gpu="0"))
        powers.add(value(body, "DCGM_FI_DEV_POWER_USAGE", gpu="0"))
        time.sleep(0.2)
    assert len(utils) == 1 and None not in utils, utils
    assert len(powers) > 1, powers
