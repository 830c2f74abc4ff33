"""dcgm-exporter flags that gpu-enricher serves differently or not at all: those that configure
a DCGM host engine (one INFO line each, nothing changes) and the web timeouts' Go durations."""

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_enricher.cli.compat import NEEDS_HOST_ENGINE, NOT_IMPLEMENTED, SERVED_OTHERWISE
from gpu_enricher.cli.dcgm_flags import DCGM_EXPORTER_FLAGS
from gpu_enricher.cli.flag_values import UsageError, parse_go_duration
from gpu_enricher.cli.settings import Note, parse_config
from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture

SET_VALUES = {"remote-hostengine-info": "nvidia-dcgm:5555", "dcgm-log-level": "DEBUG",
              "watch-max-keep-age": "1m0s", "watch-max-keep-samples": "100",
              "cpu-devices": "g:0", "switch-devices": "g"}


@pytest.mark.parametrize("long", sorted(NEEDS_HOST_ENGINE))
def test_a_host_engine_flag_that_is_set_is_one_note_with_its_reason(long: str) -> None:
    flag = next(f for f in DCGM_EXPORTER_FLAGS if f.long == long)
    given = [f"--{long}", SET_VALUES[long]] if flag.takes_value else [f"--{long}"]
    _, warnings = parse_config(given, {})
    assert len(warnings) == 1 and isinstance(warnings[0], Note), warnings
    assert warnings[0].startswith(f"--{long}=") and NEEDS_HOST_ENGINE[long] in warnings[0]
    # Its own environment variable, likewise; its default value or `false` says nothing.
    _, warnings = parse_config([], {flag.env[0]: SET_VALUES.get(long, "true")})
    assert len(warnings) == 1 and isinstance(warnings[0], Note), warnings
    assert parse_config([], {flag.env[0]: flag.default})[1] == []


@pytest.mark.parametrize("long", sorted(SERVED_OTHERWISE))
def test_a_flag_served_another_way_is_one_note_with_its_reason(long: str) -> None:
    flag = next(f for f in DCGM_EXPORTER_FLAGS if f.long == long)
    _, warnings = parse_config([], {flag.env[0]: "2s" if flag.takes_value else "true"})
    assert len(warnings) == 1 and isinstance(warnings[0], Note), warnings
    assert SERVED_OTHERWISE[long] in warnings[0]


def test_an_unimplemented_flag_warns_with_its_reason() -> None:
    _, warnings = parse_config(["--enable-pprof"], {})
    assert len(warnings) == 1 and not isinstance(warnings[0], Note), warnings
    assert NOT_IMPLEMENTED["enable-pprof"] in warnings[0]


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("30s", 30.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("300ms", 0.3),
    ("0", 0.0), ("0s", 0.0), (".5s", 0.5), ("1h2m3.5s", 3723.5), ("2us", 2e-6), ("+3s", 3.0),
    ("-2s", -2.0)])
def test_go_durations_read_as_go_reads_them(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "1x", "--1s", "1s2", "1 s", "ten s"])
def test_a_go_duration_without_a_unit_or_with_a_wrong_one_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="expected a Go duration"):
        parse_go_duration(text)


def test_the_web_timeouts_read_the_charts_variables() -> None:
    config, warnings = parse_config([], {"DCGM_EXPORTER_WEB_READ_TIMEOUT": "10s",
                                         "DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "30s"})
    assert (config.web_read_timeout_seconds, config.web_write_timeout_seconds) == (10.0, 30.0)
    assert warnings == []
    config, _ = parse_config(["--web-read-timeout=1m30s", "--web-write-timeout", "0"], {})
    assert (config.web_read_timeout_seconds, config.web_write_timeout_seconds) == (90.0, 0.0)
    with pytest.raises(UsageError, match="DCGM_EXPORTER_WEB_WRITE_TIMEOUT=30: invalid duration"):
        parse_config([], {"DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "30"})
    with pytest.raises(UsageError, match="read timeout -1s is negative"):
        parse_config(["--web-read-timeout=-1s"], {})


OPERATOR_STANDALONE_DCGM = {"DCGM_EXPORTER_KUBERNETES": "true", "NODE_NAME": "gpu-node-1",
                            "DCGM_REMOTE_HOSTENGINE_INFO": "nvidia-dcgm:5555"}
"""What the GPU Operator renders into the exporter's DaemonSet with its standalone DCGM host
engine on (besides the listen address and counters path, which other tests cover)."""


def series(body: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every DCGM series by name and labels, values aside (the simulated node's move)."""
    return {(s.name, tuple(sorted(s.labels.items())))
            for family in text_string_to_metric_families(body) for s in family.samples
            if s.name.startswith("DCGM_")}


def scrape_when_labelled(exp: Exporter) -> str:
    """/metrics once the fake kubelet's pods label it (a pass or two after /ready)."""
    exp.wait_ready()
    deadline = time.monotonic() + 10
    while True:
        body = get(exp.base + "/metrics")[1]
        if 'pod="' in body or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def test_the_operators_standalone_dcgm_is_one_info_line_and_changes_no_series(
        exporters: list[Exporter]) -> None:
    plain = Exporter(["--simulate", "-c", "200"], {"NODE_NAME": "gpu-node-1"})
    engine = Exporter(["--simulate", "-c", "200"], OPERATOR_STANDALONE_DCGM)
    exporters.extend([plain, engine])
    expected, got = scrape_when_labelled(plain), scrape_when_labelled(engine)
    assert series(got) == series(expected) and series(got)
    _, err = engine.stop()
    lines = [line for line in err.splitlines() if "DCGM_REMOTE_HOSTENGINE_INFO" in line]
    assert len(lines) == 1 and " INFO " in lines[0], err
    assert "nothing changes" in lines[0]
    assert " WARNING " not in err and " ERROR " not in err, err


def test_the_bind_unbind_poll_interval_is_a_positive_go_duration() -> None:
    assert parse_config([], {})[0].gpu_bind_unbind_poll_seconds == 1.0
    env = {"DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL": "500ms"}
    assert parse_config([], env)[0].gpu_bind_unbind_poll_seconds == 0.5
    with pytest.raises(UsageError, match="poll interval 0s is not positive"):
        parse_config(["--gpu-bind-unbind-poll-interval=0s"], {})
