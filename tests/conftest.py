"""Shared fixtures. Under CI=true a missing external tool fails the test instead of skipping."""

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.reference import describe

if TYPE_CHECKING:
    from tests.fake_nvml.build import FakeNvml

ROOT = Path(__file__).resolve().parents[1]


def require_tool(name: str) -> str:
    """Path of an external tool; skip without it locally, fail without it on CI."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (tox installs it: see scripts/test-tools.py)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {message}")
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def root_logger_restored() -> Iterator[None]:
    """Tests that call `cli.main.main()` in-process configure the root logger as the process
    would (a stderr handler, level INFO); put it back, so that a later test's caplog sees only
    what that test would see alone (tests/kube/ ran after tests/cli/ once the folders mirrored
    the packages, and caught an INFO line the root level had let through)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)  # also clears the loggers' cached levels


def pytest_report_header() -> str:
    """Whether the dcgm-exporter compatibility tests read the real files or the repository's
    facts about them (tests/reference.py)."""
    return describe()


@pytest.fixture(scope="session")
def fake_nvml_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, built by gcc from tests/fake_nvml/fake_nvml.c."""
    require_tool("gcc")
    from tests.fake_nvml.build import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))


FAKE_ENV = ("FAKE_NVML_GPU_COUNT", "FAKE_NVML_GPM", "FAKE_NVML_MIG", "FAKE_NVML_NOT_SUPPORTED",
            "FAKE_NVML_LOST", "FAKE_NVML_MINOR", "FAKE_NVML_DRIVER_VERSION", "FAKE_NVML_INIT_ERROR",
            "FAKE_NVML_DEVICE_DELAY_US", "FAKE_NVML_PROCESSES", "FAKE_NVML_XIDS",
            "FAKE_NVML_POWER_SWING_MW")

_loaded: dict[str, "FakeNvml"] = {}


@pytest.fixture
def fake(fake_nvml_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator["FakeNvml"]:
    """The fake libnvidia-ml loaded into this process (once: a soname loads only once),
    reset to the FAKE_NVML_* defaults."""
    from tests.fake_nvml.build import FakeNvml

    lib = _loaded.get("lib")
    if lib is None:
        lib = _loaded["lib"] = FakeNvml(fake_nvml_path)
    for name in FAKE_ENV:
        monkeypatch.delenv(name, raising=False)
    lib.reset()
    yield lib
