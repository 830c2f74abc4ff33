"""Shared fixtures. Under CI=true a missing external tool fails the test instead of skipping."""

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = ROOT.parent / "shared" / "reference"


def require_tool(name: str) -> str:
    """Path of an external tool; skip without it locally, fail without it on CI."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (on Debian: see .ci/run)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {message}")
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def fake_nvml_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, built by gcc from tests/fake_nvml/fake_nvml.c."""
    require_tool("gcc")
    from tests.fake_nvml.build import build_fake_nvml

    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))
