"""Flags, environment variables (ours and dcgm-exporter's), warnings and exit codes."""

from pathlib import Path

import pytest

from gpu_enricher.cli.compat import NEEDS_HOST_ENGINE, NOT_IMPLEMENTED, SERVED_OTHERWISE
from gpu_enricher.cli.dcgm_flags import DCGM_EXPORTER_FLAGS
from gpu_enricher.cli.flag_values import UsageError, parse_address
from gpu_enricher.cli.flags import build_parser, compat_flags
from gpu_enricher.cli.main import EXIT_USAGE, main
from gpu_enricher.cli.settings import parse_config
from gpu_enricher.fields.collection import default_counters_path
from gpu_enricher.sim.scenario import ScenarioError, load_scenario


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
    env["NODE_NAME"] = "gpu-node-3"
    config, warnings = parse_config(["-d", "f", "--web-config-file", "/etc/web.yaml",
                                     "--enable-pprof"], env)
    assert config.collectors == Path("/etc/dcgm-exporter/dcp-metrics-included.csv")
    assert config.hostname is None
    assert config.kubernetes and config.gpu_id_type == "device-name" and config.virtual_gpus
    assert config.kubelet_socket == Path("/var/snap/microk8s/kubelet.sock")
    assert config.extra_resources == {"nvidia.com/gpu.shared", "nvidia.com/a100"}
    assert config.pod_uid and config.kube_api, "pod UIDs come from the Kubernetes API"
    assert config.web_config_file == Path("/etc/web.yaml"), "implemented (issue 13)"
    joined = "\n".join(warnings)
    assert "--enable-pprof='true'" in joined
    assert "web-config" not in joined
    assert "POD_UID" not in joined, "implemented: no warning"
    assert "devices" not in joined, "-d f is dcgm-exporter's default: nothing to warn about"
    assert len(warnings) == 1


def test_shape_flags_from_the_command_line_and_dcgm_exporters_variables() -> None:
    config, warnings = parse_config(["-d", "g:0,2-3", "-rbmn", "-o"], {})
    assert (config.devices, config.replace_blanks_in_model_name, config.use_old_namespace) == (
        "g:0,2-3", True, True)
    assert warnings == []
    config, _ = parse_config([], {"DCGM_EXPORTER_DEVICES_STR": "i:7",
                                  "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME": "true",
                                  "DCGM_EXPORTER_USE_OLD_NAMESPACE": "1"})
    assert (config.devices, config.replace_blanks_in_model_name, config.use_old_namespace) == (
        "i:7", True, True)
    config, _ = parse_config(["--devices", "g"], {"DCGM_EXPORTER_DEVICES_STR": "i"})
    assert config.devices == "g", "the command line wins"
    config, _ = parse_config([], {})
    assert (config.devices, config.replace_blanks_in_model_name, config.use_old_namespace) == (
        "f", False, False)


def test_dra_flags_and_the_operators_variable() -> None:
    config, warnings = parse_config(["-k"], {"DCGM_EXPORTER_KUBERNETES_ENABLE_DRA": "true",
                                             "NODE_NAME": "n"})
    assert config.dra and config.reads_slices and config.kube_api and not warnings
    assert not config.reads_pods, "DRA alone needs ResourceSlices, not pods (RBAC)"
    assert config.dra_drivers == {"gpu.nvidia.com"}
    config, _ = parse_config(["-k", "--kubernetes-enable-dra", "--kubernetes-dra-driver-names",
                              "gpu.nvidia.com, compute-domain.nvidia.com"], {"NODE_NAME": "n"})
    assert config.dra_drivers == {"gpu.nvidia.com", "compute-domain.nvidia.com"}
    config, warnings = parse_config([], {"KUBERNETES_ENABLE_DRA": "true"})
    assert config.dra and not config.reads_slices and not config.kube_api
    assert warnings == ["--kubernetes-enable-dra needs -k/--kubernetes (the kubelet's claims) "
                        "and the Kubernetes API (ResourceSlices): DRA labels off"]


def test_process_and_pod_label_flags() -> None:
    config, warnings = parse_config(
        ["--process-metrics", "--proc-root", "/host/proc", "--kubeconfig", "/k/config",
         "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex",
         "^app$, team"], {"NODE_NAME": "gpu-node-7", "GPU_ENRICHER_KUBELET_LOG_ROOT": "/host/log"})
    assert not warnings
    assert config.process_metrics and config.reads_proc and config.kube_api
    assert config.proc_root == Path("/host/proc")
    assert config.kubelet_log_root == Path("/host/log")
    assert config.kubeconfig == Path("/k/config")
    assert config.pod_labels and not config.pod_uid
    assert config.pod_label_allowlist == ("^app$", "team")
    assert config.node_name == "gpu-node-7"
    plain, _ = parse_config([], {})
    assert not plain.kube_api and not plain.reads_proc, "nothing reads the API or /proc unasked"
    no_api, warnings = parse_config(["--process-metrics", "--kubernetes-api=false",
                                     "--kubernetes-enable-pod-uid"], {})
    assert no_api.reads_proc and not no_api.kube_api, "names from the log directories only"
    assert warnings == ["--kubernetes-enable-pod-labels and --kubernetes-enable-pod-uid need "
                        "the Kubernetes API, which --kubernetes-api=false switches off: no pod "
                        "labels or UIDs"]
    _, unnamed = parse_config(["--kubernetes-enable-pod-uid"], {})
    assert len(unnamed) == 1 and unnamed[0].startswith("NODE_NAME is not set: asking the "
                                                       "Kubernetes API for the pods of node")
    with pytest.raises(UsageError, match="invalid regular expression '\\('"):
        parse_config(["--kubernetes-pod-label-allowlist-regex", "("], {})


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


@pytest.mark.parametrize("bad", ["9400", ":0", ":70000", "host:", ":port",
                                 ":\u0669\u0664\u0660\u0660"])  # Arabic-Indic 9400
def test_bad_addresses(bad: str) -> None:
    with pytest.raises(UsageError, match="invalid address"):
        parse_address(bad)


@pytest.mark.parametrize(("text", "why"), [
    ("[::1", "missing ']'"),
    (":9400:9400", "too many colons"),
    ("::1:9400", "too many colons (an IPv6 address goes in brackets"),
    ("[::1]9400", "missing port after ']'"),
    ("[::1]", "missing port after ']'"),
    ("[::1]:9400:9400", "too many colons after ']'"),
    ("::1]:9400", "too many colons"),
    ("host]:9400", "unexpected ']'"),
    ("[a[b]:9400", "unexpected '['"),
    ("ho[st:9400", "unexpected '['"),
])
@pytest.mark.parametrize("source", ["-a", "--address", "GPU_ENRICHER_ADDRESS",
                                    "DCGM_EXPORTER_LISTEN"])
def test_a_malformed_address_is_a_usage_error_naming_its_source(
        text: str, why: str, source: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: what Go's net.SplitHostPort refuses is a usage error (exit 2) naming the flag
    or variable, as `:65536` is, not a host name that fails to resolve at bind time (exit 1)."""
    argv = [source, text] if source.startswith("-") else []
    env = {} if argv else {source: text}
    origin = "--address" if argv else source
    message = f"{origin}={text}: invalid address {text!r}: {why}"
    with pytest.raises(UsageError) as refused:  # first: main() would start serving
        parse_config(argv, env)
    assert str(refused.value).startswith(message)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpu-enricher: error: {message}"), err


@pytest.mark.parametrize(("text", "expected"), [
    ("[]:9400", (None, 9400)), ("[127.0.0.1]:9400", ("127.0.0.1", 9400)),
    ("[fe80::1%eth0]:9400", ("fe80::1%eth0", 9400)), (" :9400\n", (None, 9400)),
])
def test_what_go_splits_is_accepted(text: str, expected: tuple[str | None, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-c", "soon"], {}, "invalid collect interval 'soon'"),
        (["-c", "10"], {}, "below the minimum"),
        (["-a", "nowhere"], {}, "invalid address 'nowhere'"),
        (["--log-format", "xml"], {}, "invalid log format 'xml'"),
        ([], {"DCGM_EXPORTER_NO_HOSTNAME": "maybe"}, "invalid boolean 'maybe'"),
        (["--kubernetes-gpu-id-type", "index"], {}, "invalid kubernetes GPU id type 'index'"),
        (["-c", "soon"], {}, "--collect-interval=soon: "),
        ([], {"DCGM_EXPORTER_NO_HOSTNAME": "maybe"}, "DCGM_EXPORTER_NO_HOSTNAME=maybe: "),
        (["-d", "g+x"], {}, "--devices=g+x: the only valid options are 'f', 'g', or 'i', but "
                            "found 'x'"),
        (["-d", "g:0-"], {}, '--devices=g:0-: strconv.Atoi: parsing "": invalid syntax'),
        ([], {"DCGM_EXPORTER_DEVICES_STR": "f:0"},
         "DCGM_EXPORTER_DEVICES_STR=f:0: no range can be specified with the flex option 'f'"),
        ([], {"DCGM_EXPORTER_USE_OLD_NAMESPACE": "old"}, "DCGM_EXPORTER_USE_OLD_NAMESPACE=old: "
                                                         "invalid boolean 'old'"),
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


def test_counters_file_without_fields_is_an_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "counters.csv"
    empty.write_text("# DCGM FIELD, Prometheus metric type, help message\n\n"
                     "# DCGM_FI_DEV_GPU_UTIL, gauge, commented out\n")
    assert main(["--simulate", "-f", str(empty)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {empty}: no fields: every line is blank or a comment "
                   "(expected 'FIELD, type, help' lines, e.g. 'DCGM_FI_DEV_GPU_UTIL, gauge, "
                   "GPU utilization (in %).')"]


def test_scenario_yaml_errors_are_one_line_with_position(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "node.yaml"
    bad.write_text("seed: 3\ngpus:\n  - model: x\n    utilization: [1, 2\npods: []\n")
    assert main(["--simulate", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {bad}:5:5: invalid YAML: expected ',' or ']', "
                   "but got ':'"]


@pytest.mark.parametrize(("text", "where"), [
    ("gpus: [{model: null}]\n", ":1: gpus[0].model"),
    ("driver_version: null\ngpus: [{}]\n", ":1: driver_version"),
])
def test_a_scenario_with_null_text_exits_2_naming_line_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str) -> None:
    """Issue 26: these started the simulated node with the default model and driver."""
    bad = tmp_path / "node.yaml"
    bad.write_text(text)
    with pytest.raises(ScenarioError):  # first: main() would start serving
        load_scenario(bad)
    assert main(["--simulate", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {bad}{where}: expected a string, got nothing "
                   "(null, ~ or no value)"]


def test_unknown_flag_is_a_short_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--no-such-flag"]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "gpu-enricher: error: unrecognized arguments: --no-such-flag"
    assert len(err) == 2 and err[1].startswith("usage: gpu-enricher [-a [HOST]:PORT]")
    assert "did you mean" not in err[0], "nothing is close to --no-such-flag"
    assert "--web-config-file" not in err[1], "the usage line is short, not every flag"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [(["--colectors", "x.csv"], "did you mean --collectors?"),
     (["--kubernetes-virtual-gpu"], "did you mean --kubernetes-virtual-gpus?"),
     (["--colect-interval=100"], "did you mean --collect-interval?"),
     (["--web-config", "w.yaml"], "did you mean --web-config-file?"),
     (["--simulte", "--debg"], "--simulte: did you mean --simulate?; --debg: did you mean "
                               "--debug?")],
)
def test_unknown_flag_close_to_a_known_one_suggests_it(
        argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gpu-enricher: error: unrecognized arguments: ")
    assert err[0].endswith(hint), err[0]


def test_go_style_single_dash_long_flags_as_dcgm_exporter_takes_them() -> None:
    config, warnings = parse_config(
        ["-collectors", "/etc/c.csv", "-kubernetes", "-debug=true", "-no-hostname=t",
         "-collect-interval=2000", "-rbmn", "-c", "1000", "-use-old-namespace",
         "-enable-pprof"], {})
    assert config.collectors == Path("/etc/c.csv")
    assert config.kubernetes and config.debug and config.hostname is None
    assert config.collect_interval_ms == 1000, "the later -c wins, as with --"
    assert config.replace_blanks_in_model_name and config.use_old_namespace
    assert [w.split("=")[0] for w in warnings] == ["--enable-pprof"]
    config, _ = parse_config(["--kubernetes=F", "-d", "f"], {})
    assert not config.kubernetes, "Go's strconv.ParseBool spellings"


def test_ambiguous_single_dash_gets_no_misleading_hint(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-rb"]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert "did you mean" not in err[0] and "-rbmn" in err[0], err


def test_flags_are_never_abbreviated_as_dcgm_exporter_never_does() -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: --coll"):
        parse_config(["--coll", "x.csv"], {})


@pytest.mark.parametrize(
    ("env", "message"),
    [({"GPU_ENRICHER_COLLECT_INTERVAL": "abc"},
      "GPU_ENRICHER_COLLECT_INTERVAL=abc: invalid collect interval 'abc'"),
     ({"DCGM_EXPORTER_INTERVAL": "50"}, "DCGM_EXPORTER_INTERVAL=50: collect interval 50 ms is "
                                        "below the minimum"),
     ({"DCGM_EXPORTER_LISTEN": "9400"}, "DCGM_EXPORTER_LISTEN=9400: invalid address '9400'"),
     ({"GPU_ENRICHER_KUBERNETES": "perhaps"},
      "GPU_ENRICHER_KUBERNETES=perhaps: invalid boolean 'perhaps'"),
     ({"DCGM_EXPORTER_ENABLE_DCGM_LOG": "sure"}, "DCGM_EXPORTER_ENABLE_DCGM_LOG=sure: invalid "
                                                 "boolean")],
)
def test_a_bad_environment_value_names_the_variable(
        env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main([]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {message}" + err[0].split(message, 1)[1]]
    assert message in err[0]


def test_help_lists_compatibility_flags_compactly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    implemented, _, compat = out.partition("dcgm-exporter compatibility (accepted, ignored):")
    assert compat, out
    ignored = [f for f in DCGM_EXPORTER_FLAGS
               if f"--{f.long}" not in implemented and f.long not in ("help", "version")]
    # Issue 24: every flag a manifest can set that changes what is exported is implemented;
    # what is left needs a DCGM host engine (9), is served another way (1) or is Go's (1);
    # issue 34 implemented the two for hosts without Kubernetes.
    assert len(ignored) == 11
    assert {f.long for f in compat_flags()} == (
        set(NEEDS_HOST_ENGINE) | set(SERVED_OTHERWISE) | set(NOT_IMPLEMENTED)), \
        "each accepted flag gpu-enricher does not implement is in one list, with its reason"
    for flag in ignored:  # named once, without dcgm-exporter's own description
        assert f"--{flag.long}" in compat, flag.long
        assert flag.help not in out, flag.long
    ignored_part, _, rest = compat.partition("flags served another way")
    otherwise, _, missing = rest.partition("flags not implemented")
    # Under "accepted, ignored": only those that need a DCGM host engine, one a line with its
    # reason.
    assert {f.long for f in ignored if f"--{f.long}" in ignored_part} == set(NEEDS_HOST_ENGINE)
    assert "-r/--remote-hostengine-info: the nv-hostengine" in ignored_part
    assert len(ignored_part.strip().splitlines()) < 30
    # Then those served another way and those not implemented, with their reasons.
    assert {f.long for f in ignored if f"--{f.long}:" in otherwise} == set(SERVED_OTHERWISE)
    assert {f.long for f in ignored if f"--{f.long}:" in missing} == set(NOT_IMPLEMENTED)
    assert "-rbmn [true|false], --replace-blanks-in-model-name" in implemented
    # Multi-letter single-dash names only where dcgm-exporter has them.
    singles = {t.split("/")[0].strip(",[") for t in out.split() if t.startswith("-")
               and not t.startswith("--")}
    assert {s for s in singles if len(s.rstrip(",")) > 2} == {"-rbmn"}, singles
    assert out.splitlines()[0].startswith("usage: gpu-enricher [-a [HOST]:PORT]")
    assert len(out.splitlines()[0]) < 100


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
    _, warnings = parse_config(["--fake-gpus=false", "--enable-pprof"], {})
    assert len(warnings) == 1 and "--enable-pprof" in warnings[0]


def test_slow_fields_interval() -> None:
    assert parse_config([], {})[0].slow_fields_interval_ms == 30000
    assert parse_config(["--slow-fields-interval", "0"], {})[0].slow_fields_interval_ms == 0
    config, _ = parse_config([], {"GPU_ENRICHER_SLOW_FIELDS_INTERVAL": "120000"})
    assert config.slow_fields_interval_ms == 120000
    with pytest.raises(UsageError, match="slow-fields interval -5 ms is negative"):
        parse_config(["--slow-fields-interval=-5"], {})


def test_hostname_label_name_flag() -> None:
    """Both names by default (issue 31: 4.8.2's Hostname and 4.8.3's hostname), one when
    chosen, none with -n."""
    from gpu_enricher.fields.names import Hostname, hostname_pairs

    config, warnings = parse_config([], {"NODE_NAME": "n1"})
    assert isinstance(config.hostname, Hostname) and config.hostname == "n1"
    assert hostname_pairs(config.hostname) == [("Hostname", "n1"), ("hostname", "n1")]
    assert warnings == []
    config, _ = parse_config(["--hostname-label-name", "hostname"], {"NODE_NAME": "n1"})
    assert config.hostname is not None and hostname_pairs(config.hostname) == [("hostname", "n1")]
    config, _ = parse_config([], {"NODE_NAME": "n1",
                                  "GPU_ENRICHER_HOSTNAME_LABEL_NAME": "Hostname"})
    assert config.hostname is not None and hostname_pairs(config.hostname) == [("Hostname", "n1")]
    config, _ = parse_config(["--hostname-label-name=both"], {"NODE_NAME": "n1"})
    assert config.hostname is not None and len(hostname_pairs(config.hostname)) == 2
    config, _ = parse_config(["-n", "--hostname-label-name=hostname"], {})
    assert config.hostname is None, "--no-hostname still drops it"
    config, _ = parse_config(["-n"], {})
    assert config.hostname is None, "both names"
    with pytest.raises(UsageError, match="GPU_ENRICHER_HOSTNAME_LABEL_NAME=HOSTNAME: invalid "
                                         "hostname label name 'HOSTNAME': expected both, "
                                         "Hostname or hostname"):
        parse_config([], {"GPU_ENRICHER_HOSTNAME_LABEL_NAME": "HOSTNAME"})


def test_naming_flag() -> None:
    from gpu_enricher.fields.collection import default_counters_path

    config, _ = parse_config([], {})
    assert config.naming == "classic" and config.collectors == default_counters_path()
    config, _ = parse_config(["--naming", "4.9"], {})
    assert config.naming == "4.9" and config.collectors == default_counters_path("4.9")
    assert parse_config([], {"GPU_ENRICHER_NAMING": "4.9"})[0].naming == "4.9"
    with pytest.raises(UsageError, match=r"--naming=4\.8: invalid naming '4\.8': expected "
                                         r"classic or 4\.9"):
        parse_config(["--naming=4.8"], {})
    help_text = build_parser().format_help()
    assert "--naming classic|4.9" in help_text
    assert "--hostname-label-name both|Hostname|hostname" in help_text


def test_kubelet_list_cpu_budget_is_a_percentage_of_one_core() -> None:
    assert parse_config([], {})[0].kubelet_list_cpu_budget == 0.02
    for argv, env, fraction in (
            (["--kubelet-list-cpu-budget", "0.5"], {}, 0.005),
            (["--kubelet-list-cpu-budget=5%"], {}, 0.05),
            (["--kubelet-list-cpu-budget", "0"], {}, 0.0),
            ([], {"GPU_ENRICHER_KUBELET_LIST_CPU_BUDGET": "100"}, 1.0)):
        assert parse_config(argv, env)[0].kubelet_list_cpu_budget == pytest.approx(fraction)
    assert "--kubelet-list-cpu-budget PERCENT" in build_parser().format_help()


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "CPU budget -1 is not between 0 and 100 percent"),
    ("101", "CPU budget 101 is not between 0 and 100 percent"),
    ("nan", "CPU budget nan is not between 0 and 100 percent"),
    ("lots", "invalid CPU budget 'lots': expected a percentage of one core, e.g. 2"),
])
def test_bad_kubelet_list_cpu_budget_exits_2_with_one_line(
        value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"--kubelet-list-cpu-budget={value}"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: --kubelet-list-cpu-budget={value}: {message}"]


def test_web_server_bounds() -> None:
    config, _ = parse_config([], {})
    assert (config.web_read_header_timeout_ms, config.web_idle_timeout_ms,
            config.web_max_connections) == (10000, 120000, 1024)
    config, _ = parse_config(["--web-read-header-timeout", "500", "--web-idle-timeout=1000",
                              "--web-max-connections", "4"], {})
    assert (config.web_read_header_timeout_ms, config.web_idle_timeout_ms,
            config.web_max_connections) == (500, 1000, 4)
    config, _ = parse_config([], {"GPU_ENRICHER_WEB_READ_HEADER_TIMEOUT": "2500",
                                  "GPU_ENRICHER_WEB_IDLE_TIMEOUT": "60000",
                                  "GPU_ENRICHER_WEB_MAX_CONNECTIONS": "64"})
    assert (config.web_read_header_timeout_ms, config.web_idle_timeout_ms,
            config.web_max_connections) == (2500, 60000, 64)
    help_text = build_parser().format_help()
    for flag in ("--web-read-header-timeout MS", "--web-idle-timeout MS",
                 "--web-max-connections N"):
        assert flag in help_text


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        # 0 would switch a protection off: not offered, a large value loosens one.
        (["--web-read-header-timeout", "0"], {},
         "--web-read-header-timeout=0: read-header timeout 0 ms must be positive"),
        (["--web-idle-timeout=-1"], {}, "--web-idle-timeout=-1: idle timeout -1 ms must be "
                                        "positive"),
        ([], {"GPU_ENRICHER_WEB_MAX_CONNECTIONS": "0"},
         "GPU_ENRICHER_WEB_MAX_CONNECTIONS=0: connection limit 0 must be positive"),
        (["--web-max-connections", "many"], {},
         "--web-max-connections=many: invalid connection limit 'many': expected a whole number"),
        (["--web-idle-timeout", "2m"], {},
         "--web-idle-timeout=2m: invalid idle timeout '2m': expected milliseconds"),
    ],
)
def test_bad_web_server_bounds_exit_2_with_one_line(
        argv: list[str], env: dict[str, str], message: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-enricher: error: {message}"]


def test_hpc_job_mapping_dir_from_the_operators_variable() -> None:
    """The GPU Operator's hpcJobMapping.enabled sets only the variable (no flag)."""
    env = {"DCGM_HPC_JOB_MAPPING_DIR": "/var/lib/dcgm-exporter/job-mapping", "NODE_NAME": "n"}
    config, warnings = parse_config([], env)
    assert config.hpc_job_mapping_dir == Path("/var/lib/dcgm-exporter/job-mapping")
    assert not warnings, "implemented: not 'accepted, ignored'"
    config, _ = parse_config(["--hpc-job-mapping-dir", "/run/jobs"], env)
    assert config.hpc_job_mapping_dir == Path("/run/jobs"), "the flag wins"
    config, _ = parse_config([], {"DCGM_HPC_JOB_MAPPING_DIR": ""})
    assert config.hpc_job_mapping_dir is None, "dcgm-exporter's default, empty: off"
    assert parse_config([], {})[0].hpc_job_mapping_dir is None


@pytest.mark.parametrize(("argv", "env", "expected"), [
    (["-m", "gpu-operator:dcgm-metrics"], {}, ("gpu-operator", "dcgm-metrics")),
    ([], {"DCGM_EXPORTER_CONFIGMAP_DATA": "ops:my.metrics"}, ("ops", "my.metrics")),
    ([], {"DCGM_EXPORTER_CONFIGMAP_DATA": "none"}, None),  # dcgm-exporter's default
    (["--configmap-data="], {}, None),
])
def test_configmap_data_as_dcgm_exporter_takes_it(
        argv: list[str], env: dict[str, str], expected: tuple[str, str] | None) -> None:
    assert parse_config(argv, env)[0].configmap == expected


@pytest.mark.parametrize("raw", ["metrics", "ops/metrics", "Ops:metrics", "ops:", ":metrics",
                                 "a:b:c"])
def test_a_bad_configmap_reference_is_one_line(raw: str) -> None:
    with pytest.raises(UsageError, match=r"expected NAMESPACE:NAME"):
        parse_config(["-m", raw], {})
