"""The house as docs/architecture.md draws it, held against the code's own imports.

Every import of every module under src/gpu_enricher is read (at the top, inside functions and
under TYPE_CHECKING alike: a lazy import is still a dependency). The parts and what each may
import come from the layering table in docs/architecture.md, so the document and the code
cannot drift apart: a new arrow between parts fails here until the table says it is meant.
"""

import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "src" / "gpu_enricher"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
GENERATED = "rpc._generated"

MAX_TOP_MODULES = 12
MAX_PACKAGE_MODULES = 16

IO_LIBRARIES = frozenset({
    "pynvml", "grpc", "aiohttp", "kubernetes_asyncio", "hpack", "h2", "socket", "ssl",
    "asyncio", "threading", "concurrent", "subprocess", "multiprocessing", "urllib", "http",
    "selectors", "signal", "queue", "uvloop", "yarl", "bcrypt", "tempfile",
})
"""What talks to the GPU driver, the network or another thread. (mmap is not among them: the
kubelet client's parse half maps anonymous memory for an answer, no file.)"""

PURE_PARTS = ("model", "config", "backend", "fields", "exposition", "health")
PARSE_HALVES = (
    "attribution.devices", "attribution.claims", "attribution.workloads",
    "attribution.podlabels", "attribution.jobmap", "attribution.shares", "collector.cycle",
    "collector.ledger", "collector.news",
    "collector.options", "collector.watch", "kube.events", "kube.pods", "kube.slices",
    "kube.claims", "kubelet.answers", "kubelet.selection", "rpc.statuses",
    "runtime.engine", "runtime.containerd", "runtime.reader",
    "web.config", "web.config_model", "cli.flag_values", "cli.dcgm_flags", "cli.compat",
    "cli.options",
    "sim.node",
    "sim.churn", "sim.cluster_state", "sim.scenario_values", "sim.scenario_pods",
    "sim.backend",
    "sim.fake_api.objects", "sim.fake_api.slices", "sim.fake_kubelet.answers",
)
"""The pure halves of the parts that also do I/O: each sees no I/O library, even through the
modules it imports."""

COMPOSITION_ROOT = frozenset({"assembly", "app", "cli.main"})
SIM_MAY_USE = frozenset({"kube.events", "kube.pods", "kube.slices"})
"""What the simulated node takes from the real clients: the parse halves that speak the
Kubernetes API, and the protobuf stubs (`GENERATED`); never a client."""
TEST_FOLDERS_NOT_PARTS = frozenset({"app", "chart", "data", "fake_nvml", "monitoring"})
"""tests/ folders that mirror no package: the exporter whole (app.py and the running process),
the Helm chart, test data, the fake NVML library, the chart's alert tests."""


@dataclass
class Module:
    name: str  # dotted, under gpu_enricher; "" for the package itself
    imports: set[str] = field(default_factory=set)  # our modules, dotted
    libraries: set[str] = field(default_factory=set)  # top-level names of everything else


def _name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def read_modules() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    names = {_name(p)[0] for p in PACKAGE.rglob("*.py")}
    for path in sorted(PACKAGE.rglob("*.py")):
        name, is_package = _name(path)
        if name.startswith(GENERATED):
            continue
        module = modules[name] = Module(name)
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("gpu_enricher"):
                        module.imports.add(alias.name.removeprefix("gpu_enricher").lstrip("."))
                    else:
                        module.libraries.add(alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    assert node.module is not None
                    if node.module.startswith("gpu_enricher"):
                        base = node.module.removeprefix("gpu_enricher").lstrip(".")
                    else:
                        module.libraries.add(node.module.split(".")[0])
                        continue
                else:
                    up = package.split(".") if package else []
                    up = up[:len(up) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:  # `from . import names` imports a module
                    sub = f"{base}.{alias.name}".lstrip(".")
                    module.imports.add(sub if sub in names else base)
    return modules


MODULES = read_modules()


def part_of(module: str) -> str:
    """The part a module belongs to: its top folder, or itself at the top."""
    return module.split(".")[0] if module else ""


def layering_table() -> dict[str, frozenset[str]]:
    """docs/architecture.md's layering table: part → the parts it may import."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Layering", 1)[1].split("\n## ", 1)[0]
    table: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"`[\w/]+`", cells[0]):
            continue
        part = cells[0].strip("`").rstrip("/")
        table[part] = frozenset(re.findall(r"`([\w]+)/?`", cells[2]))
    return table


TABLE = layering_table()


def our_imports() -> Iterator[tuple[Module, str]]:
    """(importer, imported) for every import of one of our modules but the package itself
    (`from . import __version__`)."""
    for module in MODULES.values():
        for target in sorted(module.imports):
            if target != "":
                yield module, target


def test_the_table_names_every_part_and_only_parts() -> None:
    parts = {part_of(m) for m in MODULES if m} - {"__main__"}
    assert set(TABLE) == parts, (
        f"parts without a row: {sorted(parts - set(TABLE))}; "
        f"rows without a part: {sorted(set(TABLE) - parts)}")
    for part, allowed in TABLE.items():
        assert allowed <= parts, (part, sorted(allowed - parts))


def first_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A path that comes back to where it began, or None when `graph` has no cycle."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            if (cycle := visit(nxt, [*path, node])) is not None:
                return cycle
        done.add(node)
        return None

    return next((c for n in sorted(graph) if (c := visit(n, [])) is not None), None)


def test_the_table_has_no_cycle() -> None:
    """A part may import only parts drawn below it: the table is a ladder, not a web."""
    assert first_cycle(TABLE) is None


def test_every_import_between_parts_is_in_the_table() -> None:
    unexpected = sorted(
        f"{module.name} -> {target}" for module, target in our_imports()
        if part_of(module.name) not in ("", "__main__", part_of(target))
        and part_of(target) not in TABLE[part_of(module.name)])
    assert not unexpected, "imports the layering table of docs/architecture.md does not allow"


def test_every_arrow_of_the_table_is_used() -> None:
    """A row that allows more than the code does hides the real shape: the table says what is."""
    used: dict[str, set[str]] = defaultdict(set)
    for module, target in our_imports():
        if part_of(module.name) != part_of(target):
            used[part_of(module.name)].add(part_of(target))
    unused = {part: sorted(allowed - used[part]) for part, allowed in TABLE.items()
              if allowed - used[part]}
    assert not unused


def test_no_import_cycle_between_modules() -> None:
    graph = {name: {t for t in m.imports if t in MODULES and t != name}
             for name, m in MODULES.items()}
    assert first_cycle(graph) is None


def test_only_nvml_imports_pynvml() -> None:
    importers = sorted(m.name for m in MODULES.values() if "pynvml" in m.libraries)
    assert importers and all(part_of(m) == "nvml" for m in importers), importers


def test_only_the_composition_root_imports_the_simulated_node() -> None:
    importers = sorted({module.name for module, target in our_imports()
                        if part_of(target) == "sim" and part_of(module.name) != "sim"})
    assert set(importers) <= COMPOSITION_ROOT, importers


def test_the_simulated_node_speaks_the_apis_without_their_clients() -> None:
    taken = sorted({target for module, target in our_imports()
                    if part_of(module.name) == "sim"
                    and part_of(target) in ("kube", "kubelet", "rpc")})
    assert taken, "the fakes speak the real APIs' objects"
    assert all(t in SIM_MAY_USE or t.startswith(GENERATED) for t in taken), taken


def _reached(name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        for target in MODULES[todo.pop()].imports:
            if target in MODULES and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("name", sorted(
    m for m in MODULES if part_of(m) in PURE_PARTS or m in PARSE_HALVES))
def test_pure_modules_reach_no_io(name: str) -> None:
    io = {(other, lib) for other in {name, *_reached(name)}
          for lib in MODULES[other].libraries & IO_LIBRARIES}
    assert not io, f"{name} reaches I/O: {sorted(io)}"


def test_every_parse_half_exists() -> None:
    assert set(PARSE_HALVES) <= set(MODULES), sorted(set(PARSE_HALVES) - set(MODULES))


def test_the_top_and_each_folder_hold_few_modules() -> None:
    folders: dict[Path, list[str]] = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if GENERATED.replace(".", "/") not in path.as_posix():
            folders[path.parent].append(path.name)
    top = folders.pop(PACKAGE)
    assert len(top) <= MAX_TOP_MODULES, sorted(top)
    crowded = {str(f.relative_to(PACKAGE)): len(names) for f, names in folders.items()
               if len(names) > MAX_PACKAGE_MODULES}
    assert not crowded


def test_each_package_says_what_it_does_may_import_and_who_imports_it() -> None:
    for path in sorted(PACKAGE.rglob("__init__.py")):
        name, _ = _name(path)
        if name.startswith(GENERATED) or name == "":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert "May import:" in doc and "Imported by:" in doc, path


def test_tests_mirror_the_packages() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    assert packages <= folders, sorted(packages - folders)
    assert folders - packages <= TEST_FOLDERS_NOT_PARTS, sorted(folders - packages)
