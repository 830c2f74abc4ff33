"""A fresh clone has nothing beside it: no ../shared/reference/ with dcgm-exporter's files.

A copy of the checkout's files (as a clone would have them) in a folder with nothing beside it
must collect every test without error and pass the dcgm-exporter compatibility tests from the
repository's own facts (tests/data): none failed, none skipped.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool

# "===== 6 passed, 246 deselected in 9.12s =====", or "252 tests collected in 0.51s" (-q)
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+.*?) in [\d.]+s(?: \([^)]*\))?\s*=*$")


def clone_like_copy(git: str, destination: Path) -> None:
    """The files a clone of this checkout would have, uncommitted work included."""
    listed = subprocess.run([git, "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, timeout=60, check=False)
    if listed.returncode != 0:
        message = f"{ROOT} is not a git checkout: {listed.stderr.decode().strip()}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {message}")
        pytest.skip(message)
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a tracked file deleted in the work tree is listed too
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def counts(output: str) -> dict[str, int]:
    """pytest's summary line as {"passed": n, "failed": n, ...}."""
    for line in reversed(output.splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", found["counts"])}
    raise AssertionError(f"no pytest summary line in:\n{output[-3000:]}")


def test_a_fresh_clone_passes_the_reference_tests_from_its_own_facts(tmp_path: Path) -> None:
    git = require_tool("git")
    for tool in ("prometheus", "promtool"):  # the copy's dashboard and lint tests need them
        require_tool(tool)
    checkout = tmp_path / "clone" / "gpu-enricher"
    clone_like_copy(git, checkout)
    assert (checkout / "tests" / "reference.py").is_file()
    assert not (checkout.parent / "shared").exists()
    # Locally, not on CI: CI=true would (rightly) fail without the real files.
    env = {k: v for k, v in os.environ.items()
           if k != "CI" and not k.startswith(("PYTEST_", "FAKE_NVML_"))}

    def pytest_in_copy(*args: str) -> tuple[str, dict[str, int]]:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
             f"--basetemp={tmp_path / 'basetemp'}", *args],
            cwd=checkout, env=env, capture_output=True, text=True, timeout=300, check=False)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-5000:]
        return output, counts(output)

    output, collected = pytest_in_copy("--collect-only", "-q")
    assert collected.get("tests", 0) > 0 and "error" not in collected, output[-3000:]

    output, summary = pytest_in_copy("-m", "reference_compat", "-rfEs")
    # The copy's own tests/reference.py, which found no shared/ beside the copy.
    assert (f"dcgm-exporter reference files: repository facts in {checkout / 'tests' / 'data'}"
            in output), output[:2000]
    assert summary.get("passed", 0) > 0, output[-5000:]
    assert not {"failed", "error", "errors", "skipped", "xfailed", "xpassed"} & set(summary), (
        output[-5000:])
