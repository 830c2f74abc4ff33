"""Flags, environment variables (ours and dcgm-exporter's), warnings and exit codes."""

from pathlib import Path

import pytest

from gpu_enricher.cli import (
    EXIT_USAGE,
    UsageError,
    build_parser,
    default_counters_path,
    main,
    parse_address,
    parse_config,
)
from gpu_enricher.dcgm_flags import DCGM_EXPORTER_FLAGS


def test_defaults() -> None:
    config, warnings = parse_config([], {"NODE_NAME": "gpu-node-1"})
    assert (config.host, config.port) == (None, 9400)
    assert config.collect_interval_ms == 5000
    assert config.collectors == default_counters_path() and config.collectors.is_file()
    assert config.hostname == "gpu-node-1"
    assert config.simulate is None
    assert warnings == []


def test_flags_beat_our_env_which_beats_dcgm_env() -> None:
    env = {"GPU_ENRICHER_COLLECT_INTERVAL": "2000", "DCGM_EXPORTER_INTERVAL": "3000",
           "DCGM_EXPORTER_LISTEN": ":9500"}
    config, _ = parse_config(["-c", "1000"], env)
    assert config.collect_interval_ms == 1000
    config, _ = parse_config([], env)
    assert config.collect_interval_ms == 2000
    assert config.port == 9500
    config, _ = parse_config([], {"DCGM_EXPORTER_INTERVAL": "3000"})
    assert config.collect_interval_ms == 3000


def test_dcgm_manifest_env_and_flags_are_accepted() -> None:
    env = {"DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcp-metrics-included.csv",
           "DCGM_EXPORTER_NO_HOSTNAME": "true", "DCGM_EXPORTER_KUBERNETES": "true",
           "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "device-name",
           "DCGM_POD_RESOURCES_KUBELET_SOCKET": "/var/snap/microk8s/kubelet.sock",
           "NVIDIA_RESOURCE_NAMES": "nvidia.com/gpu.shared, nvidia.com/a100",
           "KUBERNETES_VIRTUAL_GPUS": "true", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true"}
    config, warnings = parse_config(["-d", "f", "--web-config-file", "/etc/web.yaml"], env)
    assert config.collectors == Path("/etc/dcgm-exporter/dcp-metrics-included.csv")
    assert config.hostname is None
    assert config.kubernetes and config.gpu_id_type == "device-name" and config.virtual_gpus
    assert config.kubelet_socket == Path("/var/snap/microk8s/kubelet.sock")
    assert config.extra_resources == {"nvidia.com/gpu.shared", "nvidia.com/a100"}
    joined = "\n".join(warnings)
    assert "--web-config-file='/etc/web.yaml'" in joined
    assert "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID='true'" in joined
    assert "devices" not in joined, "-d f is dcgm-exporter's default: nothing to warn about"
    assert len(warnings) == 2


def test_every_dcgm_flag_is_accepted_and_documented() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for flag in DCGM_EXPORTER_FLAGS:
        assert f"--{flag.long}" in help_text, flag.long
    assert "DCGM_EXPORTER_LISTEN" in help_text and "GPU_ENRICHER_ADDRESS" in help_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":9400", (None, 9400)), ("127.0.0.1:9401", ("127.0.0.1", 9401)),
     ("[::1]:9402", ("::1", 9402)), ("localhost:80", ("localhost", 80))],
)
def test_addresses(text: str, expected: tuple[str | None, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("bad", ["9400", ":0", ":70000", "host:", ":port"])
def test_bad_addresses(bad: str) -> None:
    with pytest.raises(UsageError, match="invalid address"):
        parse_address(bad)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-c", "soon"], {}, "invalid collect interval 'soon'"),
        (["-c", "10"], {}, "below the minimum"),
        (["-a", "nowhere"], {}, "invalid address 'nowhere'"),
        (["--log-format", "xml"], {}, "invalid log format 'xml'"),
        ([], {"DCGM_EXPORTER_NO_HOSTNAME": "maybe"}, "invalid boolean 'maybe'"),
        (["--kubernetes-gpu-id-type", "index"], {}, "invalid kubernetes GPU id type 'index'"),
    ],
)
def test_bad_values_exit_2_with_one_line(argv: list[str], env: dict[str, str], message: str,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("gpu-enricher: error: ") and message in err[0]


def test_bad_counters_file_exits_2_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "counters.csv"
    bad.write_text("# ok\nDCGM_FI_DEV_GPU_TEMP, gauge, fine\nDCGM_FI_DEV_GPU_TEMP, gauge\n")
    assert main(["--simulate", "-f", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {bad}:3: expected 3 comma-separated values "
                   "'FIELD, type, help', got 2: 'DCGM_FI_DEV_GPU_TEMP, gauge' "
                   "(quote a help text that contains a comma)"]


def test_unknown_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--no-such-flag"])
    assert exit_info.value.code == EXIT_USAGE


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [(["--simulate"], {}, "builtin"), (["--simulate", "node.yaml"], {}, "node.yaml"),
     ([], {"GPU_ENRICHER_SIMULATE": "true"}, "builtin"),
     ([], {"GPU_ENRICHER_SIMULATE": "false"}, None),
     ([], {"GPU_ENRICHER_SIMULATE": "/etc/node.yaml"}, "/etc/node.yaml"), ([], {}, None)],
)
def test_simulate_flag_and_env(argv: list[str], env: dict[str, str], expected: str | None) -> None:
    assert parse_config(argv, env)[0].simulate == expected


def test_boolean_flags_take_an_optional_value_as_dcgm_exporter_does() -> None:
    config, _ = parse_config(["--kubernetes=true", "--no-hostname=false", "-k"], {})
    assert config.kubernetes and config.hostname is not None
    config, _ = parse_config(["--kubernetes=false"], {})
    assert not config.kubernetes
    _, warnings = parse_config(["--fake-gpus=false", "--enable-dcgm-log"], {})
    assert len(warnings) == 1 and "--enable-dcgm-log" in warnings[0]


def test_dcgm_image_counters_path_falls_back_to_the_bundled_file(
        caplog: pytest.LogCaptureFixture) -> None:
    from gpu_enricher.cli import counters_path

    missing = Path("/etc/dcgm-exporter/dcp-metrics-included.csv")
    assert counters_path(missing) == default_counters_path()
    assert "dcp-metrics-included.csv" in caplog.text
    other = Path("/etc/custom/counters.csv")
    assert counters_path(other) == other, "other paths stay errors if missing"
