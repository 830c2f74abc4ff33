"""Where the counters come from, in dcgm-exporter's precedence: -f (or its variable), then the
config file's metrics, then /etc/dcgm-exporter/default-counters.csv, then the bundled list;
/etc/dcgm-exporter mapped into a temporary folder as the tests map it for the real process."""

from pathlib import Path

import pytest

from gpu_enricher.fields.collection import (
    CountersSources,
    default_counters_path,
    load_collection,
)
from gpu_enricher.fields.counters import CountersFileError, load_counters
from gpu_enricher.fields.exporter_config import ExporterConfigError

ETC = Path("/etc/dcgm-exporter")
TEMP = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
POWER = "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
CLOCK = "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"


def fields(sources: CountersSources) -> list[str]:
    return [line.field for line in load_collection(sources).counters]


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """dcgm-exporter's /etc/dcgm-exporter, mapped."""
    folder = tmp_path / "etc-dcgm-exporter"
    folder.mkdir()
    return folder


def test_nothing_set_and_no_default_file_is_the_bundled_list(image: Path) -> None:
    collection = load_collection(CountersSources(image_dir=image))
    assert collection.counters == load_counters(default_counters_path())
    assert collection.origin == (f"counters file {default_counters_path()} (no -f given and no "
                                 "/etc/dcgm-exporter/default-counters.csv: the bundled classic "
                                 "list)")
    # Watched: a customMetrics ConfigMap mounted there later is a reload.
    assert collection.watched == (image / "default-counters.csv",)


def test_naming_4_9_bundles_dcgm_exporter_4_9s_names_where_the_bundled_list_stands_in(
        image: Path) -> None:
    """--naming 4.9: the bundled list is the 4.9 one, with no file and for an absent file of
    dcgm-exporter's image (the GPU Operator's dcp-metrics-included.csv); a file that is there
    is read as it is, whatever its names."""
    bundled = load_counters(default_counters_path("4.9"))
    assert "DCGM_FI_DEV_GPU_UTIL_RATIO" in {line.field for line in bundled}
    nothing = load_collection(CountersSources(image_dir=image, naming="4.9"))
    assert nothing.counters == bundled
    assert nothing.origin.endswith(": the bundled 4.9 list)")
    absent = load_collection(CountersSources(ETC / "dcp-metrics-included.csv", "-f/--collectors",
                                             image_dir=image, naming="4.9"))
    assert absent.counters == bundled
    (image / "dcp-metrics-included.csv").write_text(TEMP)
    present = load_collection(CountersSources(ETC / "dcp-metrics-included.csv",
                                              "-f/--collectors", image_dir=image, naming="4.9"))
    assert [line.field for line in present.counters] == ["DCGM_FI_DEV_GPU_TEMP"]


def test_nothing_set_reads_dcgm_exporters_default_path_when_it_exists(image: Path) -> None:
    """dcgm-exporter's chart 4.8.3 passes no -f and mounts customMetrics there."""
    (image / "default-counters.csv").write_text(TEMP)
    collection = load_collection(CountersSources(image_dir=image))
    assert [line.field for line in collection.counters] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert collection.origin == (f"counters file {image}/default-counters.csv (no -f given, "
                                 "and dcgm-exporter's default "
                                 "/etc/dcgm-exporter/default-counters.csv exists)")


def test_precedence_flag_then_config_file_then_default_then_bundled(
        image: Path, tmp_path: Path) -> None:
    (image / "default-counters.csv").write_text(TEMP)
    (image / "from-config.csv").write_text(POWER)
    flagged = tmp_path / "flag.csv"
    flagged.write_text(CLOCK)
    config = image / "config.yaml"
    config.write_text("version: 1\nmetrics:\n  file: /etc/dcgm-exporter/from-config.csv\n"
                      "collection:\n  interval: 10s\n")
    with_config = CountersSources(config_file=ETC / "config.yaml", image_dir=image)
    assert fields(with_config) == ["DCGM_FI_DEV_POWER_USAGE"]
    collection = load_collection(with_config)
    assert collection.interval_ms == 10_000
    assert collection.origin == (f"counters file {image}/from-config.csv (named by metrics.file "
                                 f"of {image}/config.yaml)")
    assert collection.watched == (config, image / "from-config.csv")
    flag = CountersSources(collectors=flagged, collectors_origin="DCGM_EXPORTER_COLLECTORS",
                           config_file=ETC / "config.yaml", image_dir=image)
    assert fields(flag) == ["DCGM_FI_DEV_SM_CLOCK"]
    assert load_collection(flag).origin.endswith("(named by DCGM_EXPORTER_COLLECTORS)")
    assert load_collection(flag).interval_ms == 10_000, "the file still sets the interval"
    config.write_text("version: 1\n")  # no metrics: the default path again
    assert fields(with_config) == ["DCGM_FI_DEV_GPU_TEMP"]


def test_inline_fields_and_watch_groups(image: Path) -> None:
    (image / "config.yaml").write_text(
        "version: 1\nmetrics:\n  fields:\n"
        "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: t}\n"
        "    - {name: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, prometheusType: counter, help: e}\n"
        "collection:\n  watchGroups:\n"
        "    - {name: energy, interval: 1m, fields: ['*ENERGY*']}\n")
    collection = load_collection(CountersSources(config_file=ETC / "config.yaml",
                                                 image_dir=image))
    assert [line.field for line in collection.counters] == [
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert collection.origin == f"the metrics.fields of {image}/config.yaml"
    assert dict(collection.field_intervals_ms) == {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 60_000}
    assert collection.watched == (image / "config.yaml",)


def test_watch_groups_match_the_counters_that_win(image: Path, tmp_path: Path) -> None:
    """-f replaces the file's metrics; a group matching none of -f's fields fails."""
    (image / "config.yaml").write_text(
        "version: 1\ncollection:\n  watchGroups:\n"
        "    - {name: power, interval: 1m, fields: [DCGM_FI_DEV_POWER_USAGE]}\n")
    flagged = tmp_path / "flag.csv"
    flagged.write_text(CLOCK)
    with pytest.raises(ExporterConfigError, match="watch group 'power' matches none of the 1"):
        load_collection(CountersSources(flagged, "-f/--collectors", ETC / "config.yaml", image))


def test_an_absent_file_of_dcgm_exporters_image_is_the_bundled_list(
        image: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Copied manifests name the image's files (`-f /etc/dcgm-exporter/dcp-metrics-included.csv`):
    absent here, the bundled list with a warning rather than a crash loop."""
    sources = CountersSources(ETC / "dcp-metrics-included.csv", "-f/--collectors",
                              image_dir=image)
    collection = load_collection(sources)
    assert collection.counters == load_counters(default_counters_path())
    assert "dcp-metrics-included.csv is a counters file of dcgm-exporter's image" in caplog.text
    assert collection.origin.endswith("(-f/--collectors names "
                                      "/etc/dcgm-exporter/dcp-metrics-included.csv, which is "
                                      "absent)")
    assert collection.watched == (image / "dcp-metrics-included.csv",), "mounted later: reload"
    elsewhere = CountersSources(Path("/etc/custom/counters.csv"), "-f/--collectors",
                                image_dir=image)
    with pytest.raises(CountersFileError, match="cannot read counters file"):
        load_collection(elsewhere)  # other paths stay errors if missing


def test_a_config_file_that_is_wrong_or_absent_is_an_error(image: Path) -> None:
    with pytest.raises(ExporterConfigError, match="cannot read config file"):
        load_collection(CountersSources(config_file=ETC / "config.yaml", image_dir=image))
    (image / "config.yaml").write_text("version: 1\nmetrics: {file: /data/none.csv}\n")
    with pytest.raises(CountersFileError, match=r"/data/none\.csv: cannot read counters file"):
        load_collection(CountersSources(config_file=ETC / "config.yaml", image_dir=image))


# Issue 26: an unbalanced quote is reported at the line where its field began (quoted), and the
# column of the quote, whichever source the counters come from.
_OPENED_ON_LINE_2 = ("# DCGM FIELD, Prometheus metric type, help message\n"
                     '  DCGM_FI_DEV_GPU_UTIL, gauge, "GPU utilization (in %).\n'
                     + TEMP * 40)


@pytest.mark.parametrize("source", ["-f", "--config-file metrics.file", "-m"])
def test_an_unbalanced_quote_names_its_line_and_column(image: Path, tmp_path: Path,
                                                       source: str) -> None:
    assert _OPENED_ON_LINE_2.count("\n") == 42
    csv_file = tmp_path / "counters.csv"
    csv_file.write_text(_OPENED_ON_LINE_2)
    if source == "-f":
        sources, name = CountersSources(collectors=csv_file, image_dir=image), str(csv_file)
    elif source == "-m":
        sources = CountersSources(config_map=("gpu-operator/metrics", _OPENED_ON_LINE_2),
                                  image_dir=image)
        name = "ConfigMap gpu-operator/metrics key metrics"
    else:
        config = tmp_path / "config.yaml"
        config.write_text(f"version: 1\nmetrics:\n  file: {csv_file}\n")
        sources, name = CountersSources(config_file=config, image_dir=image), str(csv_file)
    with pytest.raises(CountersFileError) as err:
        load_collection(sources)
    assert str(err.value) == (
        f"{name}:2: malformed CSV: the quote at column 32 is not closed on its line (a field "
        'cannot span lines; a quote inside a quoted help text is doubled, ""): '
        "'DCGM_FI_DEV_GPU_UTIL, gauge, \"GPU utilization (in %).'")
