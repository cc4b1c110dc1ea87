"""The package's shape: no symlinks, every package folder installed, one import path per module.

The slow install checks (a wheel and an editable install in clean venvs, the sdist's layout)
are in test_wheel.py. The import graph is read with ``ast`` (imports inside functions
included); the dependency check maps import names to distributions with
``importlib.metadata.packages_distributions``.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_no_symlink_in_the_repository():
    assert [line for line in _tracked() if line.startswith("120000")] == []


def package_folders() -> dict[str, Path]:
    """Every installed package name and the repository folder it comes from, per pyproject.toml."""
    setup = PYPROJECT["tool"]["setuptools"]
    mapped = setup.get("package-dir", {})
    folders = {}
    for name in setup["packages"]:
        # the longest mapped prefix decides the folder: vigor_cli.sandbox.x -> sandbox/x
        prefix = max((p for p in mapped if name == p or name.startswith(p + ".")), key=len, default="")
        base = ROOT / mapped[prefix] if prefix else ROOT
        rest = name[len(prefix):].lstrip(".")
        folders[name] = base.joinpath(*rest.split(".")) if rest else base
    return folders


def test_every_package_folder_is_installed_once():
    """A folder with an __init__.py under vigor_cli/, sandbox/, verifiers/ or configs/ that
    pyproject.toml does not list would be left out of the wheel; a folder listed twice would
    have two import paths."""
    folders = package_folders()
    on_disk = {p.parent.resolve() for top in ("vigor_cli", "sandbox", "verifiers", "configs")
               for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    listed = [f.resolve() for f in folders.values()]
    assert len(listed) == len(set(listed)), folders
    assert on_disk == set(listed), (f"not installed: {sorted(map(str, on_disk - set(listed)))}; "
                                    f"listed but missing: {sorted(map(str, set(listed) - on_disk))}")


def test_the_mapped_packages_import_from_the_top_level_folders():
    """In this checkout (an editable install) vigor_cli.sandbox is sandbox/ and so on: one
    import path per module, found through the build configuration's mapping."""
    import vigor_cli.configs
    import vigor_cli.sandbox
    import vigor_cli.verifiers
    from vigor_cli.package_data import CONFIGS_DIR

    for module, folder in ((vigor_cli.sandbox, "sandbox"), (vigor_cli.verifiers, "verifiers"),
                           (vigor_cli.configs, "configs")):
        assert Path(module.__file__).resolve().parent == (ROOT / folder).resolve()
    assert CONFIGS_DIR == (ROOT / "configs").resolve()


# --------------------------------------------------------------------------- the import graph
def installed_modules(folders: dict[str, Path]) -> dict[str, Path]:
    """Installed module name -> source file, for packages given as name -> folder (each
    folder's own ``.py`` files; its subpackages are packages of their own in ``folders``):
    sandbox/pool.py is vigor_cli.sandbox.pool."""
    files = {}
    for package, folder in folders.items():
        for path in folder.glob("*.py"):
            files[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return files


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """A source file's syntax tree, read once per test session (the graph and the dependency
    checks walk the same files)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at module level or inside functions, but not those under
    ``if TYPE_CHECKING:`` (never run)."""
    found: list = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, package: str, files: dict[str, Path]) -> list[str]:
    """The dotted names one import statement loads: ``import a.b.c`` loads a.b.c; ``from a.b
    import c`` reads from a.b, and loads a.b.c too when that is a module (relative imports
    resolved against ``package``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files]


def import_graph(folders: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, imports inside functions included.
    Loading a.b.c runs the packages above it first, so an import of a.b.c is an edge to a.b.c
    and to a.b, except to a package above it that holds the importer itself (it is already
    running: a registry package importing its members, which import their siblings, is no
    cycle); ``from a.b import c`` reads a.b, an edge to a.b from anywhere.
    ``folders``: package name -> folder (default: this project's, as pyproject.toml installs
    them, so verifiers/ and sandbox/ are vigor_cli.verifiers and vigor_cli.sandbox)."""
    return _graph(tuple(sorted((package_folders() if folders is None else folders).items())))


@functools.lru_cache(maxsize=4)
def _graph(folders: tuple[tuple[str, Path], ...]) -> dict[str, set[str]]:
    files = installed_modules(dict(folders))
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _runtime_imports(parsed(path)):
            for target in _imported_names(node, package, files):
                parts = target.split(".")
                if target in files and target != name:
                    edges.add(target)
                for n in range(len(parts) - 1, 0, -1):  # the packages above it
                    above = ".".join(parts[:n])
                    if above in files and above != name and not name.startswith(above + "."):
                        edges.add(above)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.slow
def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    # it read the package and the two mapped folders under their installed names
    assert {"vigor_cli.config", "vigor_cli.tasks", "vigor_cli.sandbox", "vigor_cli.sandbox.pool",
            "vigor_cli.verifiers", "vigor_cli.verifiers.math"} <= set(graph)
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(
        ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)


@pytest.mark.slow
def test_config_and_errors_sit_at_the_bottom():
    """The config package (vigor_cli/config/) imports only its own modules and the bottom ones
    (errors.py, and user/files.py, the one reader of user files, which imports errors.py alone),
    errors.py nothing of the package: the names a config holds are checked in
    vigor_cli/settings.py, where the registries are known."""
    graph = import_graph()
    config = {m for m in graph if m == "vigor_cli.config" or m.startswith("vigor_cli.config.")}
    assert {"vigor_cli.config.run", "vigor_cli.config.task"} <= config  # it read the package
    for module in config:
        # vigor_cli.user: the folder user/files.py lives in, whose __init__ imports nothing
        assert graph[module] - config <= {"vigor_cli.errors", "vigor_cli.user", "vigor_cli.user.files"}, module
        assert "vigor_cli.config" not in graph[module] or module == "vigor_cli.config", module
    assert graph["vigor_cli.user.files"] == {"vigor_cli.errors"}
    assert graph["vigor_cli.user"] == set()
    assert graph["vigor_cli.errors"] == set()


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _write_package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """Writes ``files`` (path -> source) under ``root``; returns {pkg: root/pkg, pkg.reg:
    root/pkg/reg, pkg.extra: root/extra} (a folder mapped to another name, as sandbox/ is)."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return {"pkg": root / "pkg", "pkg.reg": root / "pkg" / "reg", "pkg.extra": root / "extra"}


# A registry package filled by importing its members inside functions, as vigor_cli/tasks is;
# each case below adds one file to it.
REGISTRY = {
    "pkg/__init__.py": "",
    "pkg/reg/__init__.py": "from pkg.shared import Base\n\ndef build():\n    from pkg.reg.member import Member\n"
                           "    return Member()\n",
    "pkg/reg/member.py": "from pkg.reg.types import Kind\nfrom pkg.shared import Base\n\nclass Member(Base): ...\n",
    "pkg/reg/types.py": "Kind = int\n",
    "extra/__init__.py": "def __getattr__(name):\n    from pkg.extra import pool\n    return getattr(pool, name)\n",
    "extra/limits.py": "LIMIT = 1\n",
}


@pytest.mark.parametrize("shared, extra_pool, cycle", [
    # no cycle: the registry imports its members, which import their siblings and the outside
    ("class Base: ...\n", "from pkg.extra.limits import LIMIT\n", []),
    # no cycle: an import under TYPE_CHECKING never runs
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.reg import member\nclass Base: ...\n",
     "from pkg.extra.limits import LIMIT\n", []),
    # an import inside a function closes the circle pkg.reg -> member -> shared -> pkg.reg
    ("class Base:\n    def f(self):\n        from pkg.reg import build\n", "", ["pkg.reg", "pkg.reg.member", "pkg.shared"]),
    # importing pkg.reg.types runs pkg.reg's __init__ first: the same circle, named by a submodule
    ("class Base:\n    def f(self):\n        import pkg.reg.types\n", "", ["pkg.reg", "pkg.reg.member", "pkg.shared"]),
    # a member of a mapped folder reading from its package (as sandbox/pool.py did)
    ("class Base: ...\n", "from pkg.extra import limits\n", ["pkg.extra", "pkg.extra.pool"]),
    # the same through a relative import
    ("class Base: ...\n", "from . import limits\n", ["pkg.extra", "pkg.extra.pool"]),
])
def test_the_import_graph_finds_a_planted_cycle(tmp_path, shared, extra_pool, cycle):
    """On a small package written here: imports inside functions count, importing a.b.c counts
    as importing a.b (except for a.b's own modules), a mapped folder is read under its
    installed name; TYPE_CHECKING imports do not count."""
    folders = _write_package(tmp_path, {**REGISTRY, "pkg/shared.py": shared, "extra/pool.py": extra_pool})
    graph = import_graph(folders)
    assert set(graph) == {"pkg", "pkg.shared", "pkg.reg", "pkg.reg.member", "pkg.reg.types",
                          "pkg.extra", "pkg.extra.limits", "pkg.extra.pool"}
    assert graph["pkg.reg.member"] == {"pkg.reg.types", "pkg.shared"}  # not its own package
    assert "pkg.extra.pool" in graph["pkg.extra"]
    assert cycles(graph) == ([cycle] if cycle else [])


def test_the_import_paths_kept_by_the_cycle_fixes_still_work():
    """What moved to break a circle is still found where it was: the task interface under
    vigor_cli.tasks (and .base), the sandbox's names (loads_base_copy in the learner, which
    imports torch: the slow test below)."""
    import vigor_cli.sandbox
    import vigor_cli.sandbox.pool
    import vigor_cli.task_base
    import vigor_cli.tasks
    import vigor_cli.tasks.base

    for name in ("Example", "Score", "Task", "grade", "score_once"):
        assert getattr(vigor_cli.tasks.base, name) is getattr(vigor_cli.task_base, name)
    for name in ("Example", "Score", "Task"):
        assert getattr(vigor_cli.tasks, name) is getattr(vigor_cli.task_base, name)
    assert vigor_cli.sandbox.SandboxPool is vigor_cli.sandbox.pool.SandboxPool


@pytest.mark.slow  # a new interpreter
def test_the_rewards_load_without_the_task_registry():
    """The rewards (and their Score) import without the task registry, which imports them;
    the built-in reward names appear once the registry is imported; the learner still holds
    loads_base_copy."""
    import sys

    code = ("import sys, vigor_cli.user.rewards as r; assert 'vigor_cli.tasks' not in sys.modules, 'tasks loaded'; "
            "assert r.builtin_names() == []; import vigor_cli.tasks; print(','.join(r.builtin_names())); "
            "import vigor_cli.train.learner as l, vigor_cli.model.base_copy as b; assert l.loads_base_copy is b.loads_base_copy")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert {"tiny-math", "math", "code"} <= set(res.stdout.strip().split(","))

# --------------------------------------------------------------------------- declared dependencies
OPTIONAL_EXTRAS = {"gpu", "trl", "tensorboard", "wandb", "trackio"}
"""The extras whose packages the code may import only where it guards them; `test` is for the
test suite (its trl is the trl extra's)."""


def _dist(requirement: str) -> str:
    """The normalised distribution name of a requirement line: 'math-verify[x]>=0.7' -> 'math-verify'."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """(core dependencies, extra -> its dependencies), as normalised distribution names."""
    project = PYPROJECT["project"]
    extras = {extra: {_dist(r) for r in reqs} for extra, reqs in project.get("optional-dependencies", {}).items()}
    return {_dist(r) for r in project["dependencies"]}, extras


def _guarded(parents: list[ast.AST]) -> bool:
    """An import inside a function (run only on the path that needs it) or under a try whose
    handler catches ImportError."""
    for node in parents:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                names = ast.unparse(handler.type) if handler.type is not None else "BaseException"
                if any(n in names for n in ("ImportError", "ModuleNotFoundError", "Exception")):
                    return True
    return False


@functools.lru_cache(maxsize=1)
def third_party_imports() -> dict[str, list[tuple[str, bool]]]:
    """Top-level name -> [(file:line, guarded)] for every import of a module outside the
    standard library and the package, plus the sandbox's preload list (imported by name)."""
    import sys

    found: dict[str, list[tuple[str, bool]]] = {}

    def visit(node: ast.AST, parents: list[ast.AST], where: Path) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("vigor_cli", "__future__"):
                found.setdefault(top, []).append((f"{where.relative_to(ROOT)}:{node.lineno}", _guarded(parents)))
        for child in ast.iter_child_nodes(node):
            visit(child, parents + [node], where)

    for top in ("vigor_cli", "sandbox", "verifiers"):
        for path in (ROOT / top).rglob("*.py"):
            if "__pycache__" not in path.parts:
                visit(parsed(path), [], path)
    from vigor_cli.sandbox.landlock import PRELOADED_PACKAGES

    for name in PRELOADED_PACKAGES:  # every sandboxed program may import these
        found.setdefault(name, []).append(("sandbox/landlock.py PRELOADED_PACKAGES", False))
    return found


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def distributions_of(module: str) -> set[str]:
    """The distributions that provide a top-level module, from the installed metadata
    (importlib.metadata.packages_distributions: yaml -> PyYAML); a module not installed here
    (an extra this machine lacks: vllm) is taken to be its own distribution's name."""
    dists = _packages_distributions().get(module) or [module]
    return {_dist(d) for d in dists}


@pytest.mark.slow
def test_every_imported_module_is_a_declared_dependency():
    """Unguarded imports (at module level, not under try/except ImportError) need a core
    dependency; guarded ones a core dependency or one of the optional extras."""
    core, extras = declared()
    optional = set().union(*(extras[e] for e in OPTIONAL_EXTRAS))
    problems = []
    for module, places in sorted(third_party_imports().items()):
        dists = distributions_of(module)
        if dists & core:
            continue
        unguarded = [where for where, guarded in places if not guarded]
        if dists & optional and not unguarded:
            continue
        what = "an optional extra's, imported unguarded at" if dists & optional else "not declared; imported at"
        problems.append(f"{module} ({', '.join(sorted(dists))}): {what} {', '.join(w for w, _ in places[:3])}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_the_dependency_check_sees_what_it_checks():
    """The mapping and the guard rule on known cases (so the test above can fail)."""
    assert distributions_of("yaml") == {"pyyaml"} and distributions_of("vllm") == {"vllm"}
    imports = third_party_imports()
    assert "sortedcontainers" in imports and "huggingface_hub" in imports
    assert all(guarded for _, guarded in imports["vllm"])  # behind find_spec checks, in functions
    assert any(not guarded for _, guarded in imports["torch"])  # module-level: a core dependency
    core, extras = declared()
    assert {"torch", "pyyaml", "sortedcontainers"} <= core and "vllm" in extras["gpu"]


BLOCK_EXTRAS = """
import importlib, pkgutil, sys
# None in sys.modules: importing the package raises ModuleNotFoundError, and
# importlib.util.find_spec (how accelerate and transformers probe for an optional package)
# answers None, as where it is not installed
for name in sys.argv[1].split(","):
    sys.modules[name] = None
import vigor_cli
failed = []
TRL_MODULES = ("vigor_cli.integrations.trl", "vigor_cli.integrations.trl_config", "vigor_cli.integrations.trl_metrics",
               "vigor_cli.integrations.trl_trainer", "vigor_cli.integrations.trl_evaluation")
for info in pkgutil.walk_packages(vigor_cli.__path__, "vigor_cli."):
    if info.name == "vigor_cli.__main__":
        continue  # runs the command line
    if info.name in TRL_MODULES:
        continue  # the trl extra's own modules: they say which extra to install (checked below)
    try:
        importlib.import_module(info.name)
    except Exception as e:
        failed.append(f"{info.name}: {type(e).__name__}: {e}")
for name in TRL_MODULES:
    try:
        importlib.import_module(name)
        failed.append(f"{name} imported without trl")
    except ImportError as e:
        if "vigor[trl]" not in str(e):
            failed.append(f"{name}: {e}")
print("\\n".join(failed))
"""


@pytest.mark.slow  # about 10 s: imports all of torch, transformers, datasets; .ci/run runs it
def test_every_module_imports_without_the_optional_extras():
    """With the extras' packages made unimportable, every module of the package imports (the
    trl integration says which extra it needs): optional means optional."""
    import sys

    blocked = ["vllm", "bitsandbytes", "trl", "tensorboard", "wandb", "trackio"]
    res = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS, ",".join(blocked)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "", res.stdout


# --------------------------------------------------------------------------- the house by role
TOP_LEVEL_MAX = 12


def test_at_most_twelve_modules_stand_at_the_top_level():
    """vigor_cli keeps its top level for the entry point and the few leaves every folder
    shares (errors, console, settings, ...); everything else lives in a folder named for its role
    (docs/design.md's layout)."""
    top = sorted(p.name for p in (ROOT / "vigor_cli").glob("*.py"))
    assert len(top) <= TOP_LEVEL_MAX, top


def folder_of(module: str) -> str:
    """The node a module belongs to in the folder graph: its folder under vigor_cli (a top-level
    module is a node of its own; verifiers and sandbox are folders too)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder -> the folders its modules import (imports inside functions included)."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "vigor_cli":
            continue
        a = folder_of(module)
        folders.setdefault(a, set())
        for target in targets:
            b = folder_of(target)
            if target != "vigor_cli" and a != b:
                folders[a].add(b)
                folders.setdefault(b, set())
    return folders


def test_no_two_folders_import_each_other():
    """The folders form no circle, counted over every import (inside functions too) and with each
    top-level module a node of its own: a folder's modules only ever import folders below it."""
    found = cycles(folder_graph(import_graph()))
    assert not found, "folder circles: " + "; ".join(" -> ".join(c + c[:1]) for c in found)


def test_the_folder_check_sees_a_circle_between_folders():
    graph = {"vigor_cli.a.x": {"vigor_cli.b.y"}, "vigor_cli.b.y": {"vigor_cli.c"}, "vigor_cli.c": {"vigor_cli.a.z"},
             "vigor_cli.a.z": set(), "vigor_cli.d": {"vigor_cli.a.x"}}
    assert cycles(folder_graph(graph)) == [["a", "b", "c"]]
    del graph["vigor_cli.c"]
    assert cycles(folder_graph(graph)) == []
