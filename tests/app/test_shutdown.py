"""SIGTERM as Kubernetes sends it, against the real process: exit 0 within 2 s whatever NVML
is doing (issue 13, defect 1), a second signal at once."""

import signal
import time
from pathlib import Path

from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture

HUNG = {"FAKE_NVML_DEVICE_DELAY_US": str(60_000_000)}  # every device call sleeps a minute


def nvml_exporter(fake_nvml_path: Path, env: dict[str, str]) -> Exporter:
    return Exporter(["-c", "200"], {"LD_LIBRARY_PATH": str(fake_nvml_path.parent),
                                    "FAKE_NVML_GPU_COUNT": "2", **env})


def exit_after(exp: Exporter, *signals: signal.Signals) -> tuple[int, float, str]:
    sent = time.monotonic()
    for signum in signals:
        exp.proc.send_signal(signum)
        time.sleep(0.01)
    _, err = exp.proc.communicate(timeout=30)
    return exp.proc.returncode, time.monotonic() - sent, err


def test_sigterm_while_an_nvml_call_hangs_exits_0_within_2_s(
        exporters: list[Exporter], fake_nvml_path: Path) -> None:
    exp = nvml_exporter(fake_nvml_path, HUNG)
    exporters.append(exp)
    exp.wait_listening()
    time.sleep(0.5)  # NVML's open is now stuck in a device call on the worker thread
    status, body = get(exp.base + "/ready")
    assert status == 503, body
    code, took, err = exit_after(exp, signal.SIGTERM)
    assert code == 0, err
    assert took < 2.0, f"took {took:.2f} s"
    assert "exiting with a nvml call still running" in err


def test_sigterm_while_scraped_and_serving_exits_0_within_2_s(
        exporters: list[Exporter], fake_nvml_path: Path) -> None:
    exp = nvml_exporter(fake_nvml_path, {})
    exporters.append(exp)
    exp.wait_ready()
    assert get(exp.base + "/metrics")[0] == 200
    code, took, err = exit_after(exp, signal.SIGTERM)
    assert code == 0, err
    assert took < 2.0, f"took {took:.2f} s"


def test_a_second_signal_exits_at_once(exporters: list[Exporter],
                                       fake_nvml_path: Path) -> None:
    exp = nvml_exporter(fake_nvml_path, HUNG)
    exporters.append(exp)
    exp.wait_listening()
    code, took, err = exit_after(exp, signal.SIGTERM, signal.SIGTERM)
    assert code == 0, err
    assert took < 1.0, f"took {took:.2f} s"
