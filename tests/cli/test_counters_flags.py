"""Where the counters and dcgm-exporter's config file come from on the command line and in the
environment (issue 24): what was set explicitly (which beats the config file), the config file's
variable, the seam that maps /etc/dcgm-exporter, and a wrong config file exiting 2 at start."""

from pathlib import Path

import pytest

from gpu_enricher.assembly import counters_sources
from gpu_enricher.cli.main import EXIT_USAGE, main
from gpu_enricher.cli.settings import parse_config
from gpu_enricher.fields.collection import default_counters_path


def test_nothing_set_leaves_the_choice_to_the_collection() -> None:
    config, _ = parse_config([], {})
    sources = counters_sources(config)
    assert (sources.collectors, sources.config_file) == (None, None)
    assert sources.image_dir == Path("/etc/dcgm-exporter")
    assert config.collectors == default_counters_path() and not config.collect_interval_given


@pytest.mark.parametrize(("argv", "env", "origin"), [
    (["-f", "/x.csv"], {}, "--collectors"),
    (["--collectors=/x.csv"], {"DCGM_EXPORTER_COLLECTORS": "/y.csv"}, "--collectors"),
    ([], {"GPU_ENRICHER_COLLECTORS": "/x.csv", "DCGM_EXPORTER_COLLECTORS": "/y.csv"},
     "GPU_ENRICHER_COLLECTORS"),
    ([], {"DCGM_EXPORTER_COLLECTORS": "/x.csv"}, "DCGM_EXPORTER_COLLECTORS"),
])
def test_an_explicit_counters_file_says_who_set_it(argv: list[str], env: dict[str, str],
                                                   origin: str) -> None:
    sources = counters_sources(parse_config(argv, env)[0])
    assert sources.collectors == Path("/x.csv") and sources.collectors_origin == origin


def test_the_config_file_from_the_flag_or_dcgm_exporters_variable() -> None:
    """The chart's config.enabled sets DCGM_EXPORTER_CONFIG_FILE."""
    env = {"DCGM_EXPORTER_CONFIG_FILE": "/etc/dcgm-exporter/config.yaml"}
    assert parse_config([], env)[0].config_file == Path("/etc/dcgm-exporter/config.yaml")
    assert parse_config(["--config-file", "/c.yaml"], env)[0].config_file == Path("/c.yaml")
    assert parse_config([], {"DCGM_EXPORTER_CONFIG_FILE": ""})[0].config_file is None


def test_an_explicit_interval_is_marked_to_beat_the_config_files() -> None:
    assert parse_config(["-c", "1000"], {})[0].collect_interval_given
    assert parse_config([], {"DCGM_EXPORTER_INTERVAL": "1000"})[0].collect_interval_given
    assert not parse_config([], {})[0].collect_interval_given


def test_dcgm_exporters_folder_can_be_mapped(tmp_path: Path) -> None:
    config, _ = parse_config([], {"GPU_ENRICHER_DCGM_EXPORTER_DIR": str(tmp_path)})
    sources = counters_sources(config)
    assert sources.image_dir == tmp_path
    assert sources.local(Path("/etc/dcgm-exporter/config.yaml")) == tmp_path / "config.yaml"
    assert sources.local(Path("/data/config.yaml")) == Path("/data/config.yaml")


def test_a_wrong_config_file_exits_2_with_its_position_before_nvml(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("version: 1\ncollection:\n  interval: 30s\n  watchgroups: []\n")
    # No --simulate and no NVML library loaded: the file fails before NVML would start.
    assert main(["--config-file", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {bad}:4:3: collection.watchgroups: unknown key "
                   "(expected one of interval, watchGroups)"]
