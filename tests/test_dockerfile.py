"""The Dockerfile, read without a container engine: entrypoint, environment, port, base image."""

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

import pytest

from tests.conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# python:3.11-slim, python:3.12-slim-bookworm, optionally pinned further by digest.
SLIM_PYTHON = re.compile(
    r"^(?:docker\.io/)?(?:library/)?python:3\.(?P<minor>\d+)(?:\.\d+)?-slim(?:-[a-z]+)?"
    r"(?:@sha256:[0-9a-f]{64})?$")


@dataclass
class Instruction:
    keyword: str  # upper case
    args: str  # the rest of the (joined) line


@dataclass
class Stage:
    base: str  # the FROM image, ARGs substituted
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def logical_lines(text: str) -> list[str]:
    """Dockerfile lines: comment lines dropped (also inside a continuation), a trailing
    backslash joins the next line."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        lines.append((pending + stripped).strip())
        pending = ""
    if pending.strip():
        lines.append(pending.strip())
    return [line for line in lines if line]


def substitute(text: str, variables: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return variables.get(name, "")
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", one, text)


def parse_arg(args: str) -> tuple[str, str]:
    name, _, default = args.partition("=")
    return name.strip(), default.strip().strip('"')


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            base = substitute(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, not {keyword}"
            key, default = parse_arg(args)
            global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, args))
    return global_args, stages


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), \
        f"{instruction.keyword} must be the JSON (exec) form, got {instruction.args!r}"
    return value


def key_values(args: str) -> dict[str, str]:
    """ENV/LABEL arguments: KEY=VALUE pairs, shell-quoted (or the legacy `ENV KEY VALUE`)."""
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def runtime(dockerfile: tuple[dict[str, str], list[Stage]]) -> Stage:
    return dockerfile[1][-1]


# The parser itself.

def test_parser_joins_continuations_and_skips_comments() -> None:
    text = ('ARG BASE=python:3.11-slim\nFROM ${BASE} AS build\n# c\nRUN a \\\n'
            '    # inside\n    && b\nFROM $BASE\nENV A=1 \\\n    B="two words"\n'
            'ENTRYPOINT ["x", "--y"]\n')
    global_args, stages = parse(text)
    assert global_args == {"BASE": "python:3.11-slim"}
    assert [(s.base, s.name) for s in stages] == [("python:3.11-slim", "build"),
                                                  ("python:3.11-slim", None)]
    assert stages[0].instructions == [Instruction("RUN", "a && b")]
    assert key_values(stages[1].all("ENV")[0].args) == {"A": "1", "B": "two words"}
    assert exec_form(stages[1].all("ENTRYPOINT")[0]) == ["x", "--y"]


# The Dockerfile.

def test_entrypoint_is_the_console_script(runtime: Stage) -> None:
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts.get("gpu-enricher") == "gpu_enricher.cli.main:main"
    entrypoints = runtime.all("ENTRYPOINT")
    assert entrypoints, "the runtime stage has no ENTRYPOINT"
    assert exec_form(entrypoints[-1]) == ["gpu-enricher"]
    assert exec_form(entrypoints[-1])[0] in scripts
    assert not runtime.all("CMD"), "arguments belong to the DaemonSet, not to a CMD"


def test_environment(runtime: Stage) -> None:
    env: dict[str, str] = {}
    for instruction in runtime.all("ENV"):
        env.update(key_values(instruction.args))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"].split(",")  # NVML needs only this
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_port_exposed(runtime: Stage) -> None:
    ports = {p.split("/")[0] for e in runtime.all("EXPOSE") for p in e.args.split()}
    assert "9400" in ports


def test_bases_are_pinned_slim_python(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    _, stages = dockerfile
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in names:
            continue
        match = SLIM_PYTHON.match(stage.base)
        assert match, f"base image {stage.base!r} is not a pinned python:3.x-slim tag"
        assert int(match["minor"]) >= 11
    assert SLIM_PYTHON.match(stages[-1].base), "the runtime image must be python slim itself"


def test_multi_stage_runtime_without_build_tools(
        dockerfile: tuple[dict[str, str], list[Stage]], runtime: Stage) -> None:
    _, stages = dockerfile
    assert len(stages) >= 2, "build the wheel in a separate stage"
    builds = " ".join(i.args for s in stages[:-1] for i in s.all("RUN"))
    assert "pip wheel" in builds
    runs = " ".join(i.args for i in runtime.all("RUN"))
    for tool in ("apt-get", "apk ", "gcc", "build-essential", "pip wheel", "python -m build"):
        assert tool not in runs, f"the runtime stage must not use {tool}"
    installs = " ".join(i.args for s in stages[1:-1] for i in s.all("RUN"))
    assert "--no-index" in installs, "the image installs only the wheels built before"
    assert "pip" not in runs and "/wheels" not in " ".join(i.args for i in runtime.all("COPY")), \
        "the runtime stage copies what was installed, never the wheels"
    copies = [i.args for i in runtime.all("COPY")]
    assert not any(c.split()[-1].startswith("/src") for c in copies), "no sources at run time"


def test_oci_labels(dockerfile: tuple[dict[str, str], list[Stage]], runtime: Stage) -> None:
    version = PYPROJECT["project"]["version"]
    stage_args = dict(parse_arg(i.args) for i in runtime.all("ARG"))
    labels: dict[str, str] = {}
    for instruction in runtime.all("LABEL"):
        labels.update(key_values(substitute(instruction.args, stage_args)))
    assert labels["org.opencontainers.image.title"] == "gpu-enricher"
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]["text"]
    assert labels["org.opencontainers.image.description"]


def test_build_context_holds_what_the_build_copies(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    """.dockerignore excludes everything but what the build stage copies (the README is the
    package's long description, so the wheel needs it)."""
    _, stages = dockerfile
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    assert patterns[0] == "**", ".dockerignore should start from an empty context"
    for stage in stages:
        for copy in stage.all("COPY"):
            words = [w for w in copy.args.split() if not w.startswith("--")]
            if "--from" in copy.args:
                continue
            for source in words[:-1]:
                assert source.rstrip("/") in allowed, f"COPY {source} is excluded by .dockerignore"
                assert (ROOT / source).exists()


def test_builds_without_buildkit_or_a_fetched_frontend() -> None:
    """Debian's Docker 20.10 builds without BuildKit ("the --mount option requires BuildKit"),
    and an air-gapped builder cannot fetch `docker/dockerfile` (issue 34)."""
    text = DOCKERFILE.read_text()
    assert not re.search(r"(?im)^#\s*syntax\s*=", text)
    assert not any("--mount" in line for line in logical_lines(text))
