"""`gpu-enricher inspect` as an operator runs it, against a running exporter (`--simulate`: a
node with whole GPUs and MIG instances, pods from the in-process kubelet): each GPU's UUID,
the `UUID` label of its series, and each MIG instance's own UUID, on the rows they belong to."""

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.test_process import Exporter, get


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    exp = Exporter(["--simulate", "-c", "200"], {})
    try:
        exp.wait_ready()
        yield exp
    finally:
        if exp.proc.poll() is None:
            exp.proc.kill()
        exp.proc.communicate()


def inspect(base: str, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "gpu_enricher", "inspect", "--url", base,
                             *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def held_document(base: str) -> dict[str, Any]:
    """The document once the simulated kubelet's pods are in it (a cycle or two after ready)."""
    deadline = time.monotonic() + 10
    while True:
        document: dict[str, Any] = json.loads(get(base + "/api/v1/gpus")[1])
        held = any(i["holders"] for g in document["gpus"] for i in g["mig_instances"])
        if held or time.monotonic() > deadline:
            return document
        time.sleep(0.05)


def test_inspect_shows_each_gpu_and_mig_instance_uuid(exporter: Exporter) -> None:
    document = held_document(exporter.base)
    out = inspect(exporter.base)
    devices = out.split("\n\n")[0].splitlines()
    column = devices[0].index("UUID")
    shown = {tuple(line.split()[:2]): line[column:].split()[0] for line in devices[1:]}
    expected = {(str(g["index"]), "-"): g["uuid"] for g in document["gpus"]}
    expected |= {(str(g["index"]), str(i["gpu_instance_id"])): i["uuid"]
                 for g in document["gpus"] for i in g["mig_instances"]}
    assert any(gi != "-" for _, gi in expected), "the simulated node has MIG instances"
    assert all(uuid.startswith(("GPU-", "MIG-")) for uuid in expected.values())
    assert shown == expected
    # The key of every series: each UUID label on /metrics is a GPU row's UUID.
    metrics = get(exporter.base + "/metrics")[1]
    labels = set(re.findall(r'^DCGM_FI_\w+\{[^}]*\bUUID="([^"]+)"', metrics, re.MULTILINE))
    assert labels and labels == {uuid for (_, gi), uuid in shown.items() if gi == "-"}
    # A pod's filter keeps the UUID of the instance it holds.
    instance = next((g, i) for g in document["gpus"] for i in g["mig_instances"]
                    if i["holders"])
    holder = instance[1]["holders"][0]
    only = inspect(exporter.base, "--namespace", holder["namespace"], "--pod", holder["pod"])
    rows = [line.split() for line in only.split("\n\n")[0].splitlines()]
    assert any(row[:2] == [str(instance[0]["index"]), str(instance[1]["gpu_instance_id"])]
               and instance[1]["uuid"] in row for row in rows), only


def test_inspect_on_a_docker_host_names_containers_and_people() -> None:
    exp = Exporter(["--simulate", "docker-host", "-c", "200"], {})
    try:
        exp.wait_ready()
        out = inspect(exp.base)
    finally:
        if exp.proc.poll() is None:
            exp.proc.kill()
        exp.proc.communicate()
    devices, processes = out.split("\n\n")[:2]
    held = [re.split(r"\s{2,}", line)[-1] for line in devices.splitlines()[1:]]
    assert held == ["container vllm-llama", "container embedder", "container notebook",
                    "user alice"]
    header, *rows = processes.splitlines()
    assert header.split()[-1] == "USER"
    assert [(row.split()[2], row.split()[-3], row.split()[-1]) for row in rows] == [
        ("3100", "vllm-llama", "-"), ("3300", "embedder", "-"), ("4100", "notebook", "-"),
        ("5200", "-", "alice")]
