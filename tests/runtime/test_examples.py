"""examples/docker-host: the Compose file's and the systemd unit's command lines are ones this
exporter accepts, and ask for what docs/containers.md says they do."""

import shlex

import yaml

from gpu_enricher.cli.settings import parse_config
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "docker-host"


def test_the_compose_file_runs_container_labels_on_the_mounted_socket() -> None:
    compose = yaml.safe_load((EXAMPLES / "compose.yaml").read_text())
    service = compose["services"]["gpu-enricher"]
    config, warnings = parse_config(service["command"], {})
    assert config.container_labels and not warnings
    socket = config.container_runtime_socket
    assert f"{socket}:{socket}:ro" in service["volumes"]
    assert service["read_only"] and service["cap_drop"] == ["ALL"]


def test_the_systemd_unit_runs_container_labels() -> None:
    text = (EXAMPLES / "gpu-enricher.service").read_text().replace("\\\n", " ")
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[0].endswith("/gpu-enricher")
    config, warnings = parse_config(argv[1:], {})
    assert config.container_labels and config.port == 9400 and not warnings
    assert config.container_runtime_socket == "/var/run/docker.sock"
