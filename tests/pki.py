"""Test certificates made by the openssl CLI, and Secret volumes laid out as the kubelet mounts
them: shared by the web-security, reload, chart and kubeconfig tests."""

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import require_tool

LOCAL_NAMES = "DNS:localhost,IP:127.0.0.1"


def openssl(directory: Path, *args: str) -> None:
    subprocess.run([require_tool("openssl"), *args], cwd=directory, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_ca(directory: Path, name: str, suffix: str = ".pem") -> None:
    """`name{suffix}` and `name.key`: a self-signed P-256 CA, valid two days."""
    (directory / f"{name}.cnf").write_text(
        f"[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {name}\n"
        "[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n")
    openssl(directory, "req", "-x509", "-config", f"{name}.cnf", "-extensions", "v3_ca",
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}{suffix}", "-days", "2")


def make_leaf(directory: Path, name: str, ca: str, usage: str, serial: int,
              san: str = LOCAL_NAMES, suffix: str = ".pem") -> None:
    """`name{suffix}` and `name.key`, signed by `ca` (made with the same suffix), for
    `usage` (serverAuth, clientAuth) and the names `san`."""
    (directory / f"{name}.cnf").write_text(
        f"[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {name}\n"
        f"[ext]\nbasicConstraints = CA:FALSE\nkeyUsage = critical,digitalSignature\n"
        f"extendedKeyUsage = {usage}\nsubjectAltName = {san}\n"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n")
    openssl(directory, "req", "-new", "-config", f"{name}.cnf", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr")
    openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}{suffix}", "-CAkey",
            f"{ca}.key", "-set_serial", str(serial), "-days", "2", "-extfile", f"{name}.cnf",
            "-extensions", "ext", "-out", f"{name}{suffix}")


class SecretVolume:
    """A directory laid out as the kubelet mounts a Secret or ConfigMap: `tls.crt` →
    `..data/tls.crt`, `..data` → a versioned directory, swapped by one rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.generation = 0

    def publish(self, files: Mapping[str, bytes | str]) -> None:
        self.generation += 1
        version = self.root / f"..{self.generation}"
        version.mkdir()
        for name, content in files.items():
            (version / name).write_bytes(content.encode() if isinstance(content, str)
                                         else content)
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)
        staged = self.root / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, self.root / "..data")
