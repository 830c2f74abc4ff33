"""HPC job mapping as the GPU Operator deploys it (`hpcJobMapping.enabled`): only
`DCGM_HPC_JOB_MAPPING_DIR=/var/lib/dcgm-exporter/job-mapping` in the environment and that
hostPath mounted there (here, the same path under a temporary root), the real process on the
fake libnvidia-ml, and a prolog's files coming, changing, going and going bad."""

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.app.fault_helpers import Process, fetch, nvml_env, until
from tests.samples import samples, value

OPERATOR_DIR = "/var/lib/dcgm-exporter/job-mapping"  # hpcJobMapping.directory, its default
SKIPPED = "gpu_enricher_hpc_job_mapping_skipped_files"


def temps(body: str) -> dict[str, list[str | None]]:
    """GPU index → the hpc_job of each of its temperature series (None: no label)."""
    found: dict[str, list[str | None]] = {}
    for sample in samples(body, "DCGM_FI_DEV_GPU_TEMP"):
        found.setdefault(sample.labels["gpu"], []).append(sample.labels.get("hpc_job"))
    return found


def prolog(directory: Path, gpu: str, *jobs: str) -> None:
    """What docs/hpc.md's prolog does: a temporary file renamed into place."""
    temporary = directory / f".{gpu}.tmp"
    temporary.write_text("".join(f"{job}\n" for job in jobs))
    os.rename(temporary, directory / gpu)


@pytest.fixture
async def exporter(fake_nvml_path: Path, tmp_path: Path) -> AsyncIterator[tuple[Process, Path]]:
    directory = tmp_path / OPERATOR_DIR.lstrip("/")
    directory.mkdir(parents=True)
    exp = Process(["-c", "200"], nvml_env(fake_nvml_path,
                                          DCGM_HPC_JOB_MAPPING_DIR=str(directory)))
    await asyncio.to_thread(exp.wait_ready)
    yield exp, directory
    exp.stop()


async def test_jobs_appear_change_go_and_a_bad_file_is_skipped(
        exporter: tuple[Process, Path]) -> None:
    exp, directory = exporter
    body = await until(exp, lambda b: bool(samples(b, "DCGM_FI_DEV_GPU_TEMP")))
    assert temps(body) == {"0": [None], "1": [None]}, "no file, no label"

    prolog(directory, "0", "4242")
    prolog(directory, "1", "4243", "4244")
    body = await until(exp, lambda b: temps(b) == {"0": ["4242"], "1": ["4243", "4244"]})

    prolog(directory, "0", "5151")  # the next job on GPU 0
    body = await until(exp, lambda b: temps(b)["0"] == ["5151"])
    assert temps(body)["1"] == ["4243", "4244"]

    # corrupt (renamed in whole: a pass catching it empty would log it twice): skipped, GPU 0
    # intact
    (directory / ".bad").write_bytes(b"4243\n\xff\xfe")
    os.rename(directory / ".bad", directory / "1")
    (directory / "2.0").mkdir()  # not a file
    body = await until(exp, lambda b: value(b, SKIPPED, reason="not_utf8") == 1)
    assert value(body, SKIPPED, reason="not_regular") == 1
    assert temps(body) == {"0": ["5151"], "1": [None]}

    (directory / "0").unlink()  # the epilog
    body = await until(exp, lambda b: temps(b)["0"] == [None])
    _, again = await fetch(exp)
    assert value(again, SKIPPED, reason="not_utf8") == 1, "still there, still counted"

    code, err = exp.stop()
    assert code == 0
    assert err.count(f"skipping {directory / '1'} (not_utf8)") == 1, "logged once, not per pass"
    assert err.count(f"skipping {directory / '2.0'} (not_regular)") == 1


async def test_the_directory_appearing_after_start(fake_nvml_path: Path, tmp_path: Path) -> None:
    """The hostPath may be created by the first prolog, after the exporter started."""
    directory = tmp_path / OPERATOR_DIR.lstrip("/")
    exp = Process(["-c", "200"], nvml_env(fake_nvml_path,
                                          DCGM_HPC_JOB_MAPPING_DIR=str(directory)))
    try:
        await asyncio.to_thread(exp.wait_ready)
        body = await until(exp, lambda b: value(
            b, "gpu_enricher_collection_errors_total", source="hpc",
            reason="no_directory") is not None)
        assert value(body, "gpu_enricher_source_up", source="hpc") == 0
        directory.mkdir(parents=True)
        prolog(directory, "1", "77")
        body = await until(exp, lambda b: temps(b).get("1") == ["77"])
        assert value(body, "gpu_enricher_source_up", source="hpc") == 1
    finally:
        _, err = exp.stop()
    assert err.count("cannot list the HPC job mapping directory") == 1


async def test_simulate_shows_a_job_without_the_flag() -> None:
    exp = Process(["--simulate", "-c", "200"], {"NODE_NAME": "sim-node"})
    try:
        await asyncio.to_thread(exp.wait_ready)
        body = await until(exp, lambda b: temps(b).get("0") == ["4242"])
        assert temps(body) == {"0": ["4242"], "1": [None], "2": [None, None, None],
                               "3": [None]}, "one job, on GPU 0 only"
        held = samples(body, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0].labels
        assert held["pod"] == "llm-trainer-0", "pod labels and the job, both"
    finally:
        exp.stop()
