"""dcgm-exporter's --health-require-gpus (DCGM_EXPORTER_HEALTH_REQUIRE_GPUS): /health fails while
the last pass found no GPU, so a liveness probe restarts an exporter that came up before the
driver showed its GPUs; without it, a node without GPUs passes. The real process on the fake
libnvidia-ml.so.1."""

import time
from pathlib import Path

import pytest

from tests.app.fault_helpers import Process, nvml_env
from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture


def health_once_ready(exp: Exporter) -> tuple[int, str]:
    exp.wait_ready()
    return get(exp.base + "/health")


@pytest.mark.parametrize(("gpus", "require", "status"), [
    ("0", "true", 503), ("0", None, 200), ("2", "true", 200)])
def test_health_fails_without_a_gpu_only_when_asked(
        exporters: list[Exporter], fake_nvml_path: Path, gpus: str, require: str | None,
        status: int) -> None:
    env = nvml_env(fake_nvml_path, FAKE_NVML_GPU_COUNT=gpus)
    if require is not None:
        env["DCGM_EXPORTER_HEALTH_REQUIRE_GPUS"] = require
    exp = Process(["-c", "100"], env)
    exporters.append(exp)
    got, body = health_once_ready(exp)
    assert got == status, body
    if status == 503:
        assert body == "no GPU (the last pass found none; --health-require-gpus)\n"
        time.sleep(0.3)  # passes go on: still none, still failing
        assert get(exp.base + "/health")[0] == 503
    code, err = exp.stop()
    assert code == 0 and "Traceback" not in err, err
