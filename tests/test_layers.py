"""The import structure of the package: no import cycles, and no import up the layers.

Checked with

    python -m pytest tests/test_layers.py

Every module of mapo/ is parsed with `ast` (nothing is imported), and each `import mapo.x` /
`from mapo.x import y` becomes an edge to the module it loads (`y` itself when it is a submodule).
Three kinds of import are told apart:

- module level: run when the module is imported. These must have no cycle and must never go up
  the layers below;
- function level (inside a def): run when the function is called, and type only (under
  `if TYPE_CHECKING:`): never run. Neither can make an import fail, so they are not checked for
  cycles; one that goes up the layers is a late binding, allowed only when LATE_BINDINGS lists
  it with the reason it has to be there (and a listed one that is gone fails too, so the list
  stays the true one).

String paths ("mapo.module:object", the registries' built-ins) are checked apart: each must
name a module that exists and an object defined at its top level.

LAYERS lists the layers lowest first. A module belongs to the entry that is its own name or the
longest package that holds it (the packages of ONLY_ITSELF, the root `mapo` and `mapo.core`, hold
only their own __init__: their modules are placed one by one); a module may import its own layer
and the layers below it. A module no entry holds fails the test: a new top-level module
or package is given its place here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = "mapo"
# packages whose modules are placed one by one: the entry holds the package's __init__ only
ONLY_ITSELF = (ROOT, "mapo.core")
PACKAGE_DIR = Path(__file__).resolve().parent.parent / ROOT

# lowest first: (layer, the modules and packages in it)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the package root (`import mapo` runs it before any submodule: it imports nothing at module
    # level) and the vocabulary with no mapo dependencies
    ("base", ("mapo", "mapo.core", "mapo.core.types", "mapo.registry", "mapo.validation", "mapo.text",
              "mapo.intervals")),
    # process, machine and run-folder helpers on top of the vocabulary
    ("support", ("mapo.runtime", "mapo.device", "mapo.progress", "mapo.tracking", "mapo.provenance",
                 "mapo.run_folder", "mapo.reliability", "mapo.records", "mapo.degeneracy")),
    ("backends", ("mapo.backends",)),  # LLM endpoints and chat transports of the LLM-backed roles
    ("envs", ("mapo.envs",)),
    ("models", ("mapo.generation", "mapo.gguf_cache", "mapo.chat_template", "mapo.nucleus",
                "mapo.model_source", "mapo.lora", "mapo.prompt_sharing", "mapo.policy")),
    ("engines", ("mapo.engines",)),
    # the RL core up to the loss: Scenario -> rollout -> Group -> rewards -> advantages -> losses
    ("core", ("mapo.core.rollout", "mapo.core.rewards", "mapo.core.advantage_input", "mapo.core.advantages",
              "mapo.core.advantage_state", "mapo.core.losses", "mapo.advantages")),
    ("methods", ("mapo.methods",)),  # RAPO, COMPEER: hooks into the step
    # the training config (the core's specs in one YAML), and opening a run folder with it
    ("config", ("mapo.config", "mapo.run_start")),
    ("core step", ("mapo.core.update", "mapo.core.step")),  # the update, and one whole step
    ("report", ("mapo.report",)),  # the run report and the transcript viewer (the trainer writes it)
    ("sft", ("mapo.sft",)),  # the supervised warm start (the trainer runs it first when set)
    ("core trainer", ("mapo.core.trainer",)),  # the loop
    ("evaluate", ("mapo.evaluate",)),
    ("testing", ("mapo.testing",)),  # local servers for the tests and the benchmarks
    ("lab", ("mapo.lab",)),  # ablate, bench, blind: running and reading experiments
    ("integrations", ("mapo.integrations",)),  # verl
    ("cli", ("mapo.cli",)),
]

# Function-level and type-only imports that go up the layers: (importer, imported) -> why it is late.
LATE_BINDINGS: dict[tuple[str, str], str] = {
    ("mapo", "mapo.core.trainer"): "`mapo.train`, the Python API's entry point: every `import mapo.x` runs "
                                   "mapo/__init__ first, so the trainer (torch, transformers) loads only when "
                                   "train() is called (and its result type, under TYPE_CHECKING)",
    ("mapo", "mapo.config"): "type only: the annotation of `mapo.train`'s config argument",
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the module it loads
    line: int
    kind: str  # "module", "function" or "typing"


def module_name(path: Path, package_dir: Path) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package_dir: Path) -> dict[str, Path]:
    return {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module that importing `name` loads last: `name` itself, else its longest module prefix."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_imports(name: str, path: Path, modules: Mapping[str, Path], root: str = ROOT) -> list[Import]:
    """Every import of another module of the package in one module, with its kind."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str | None, line: int, kind: str) -> None:
        if target is not None and target != name:
            found.append(Import(name, target, line, kind))

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    visit(ast.Module(body=[sub], type_ignores=[]), "typing" if kind == "module" else kind)
                for sub in child.orelse:
                    visit(ast.Module(body=[sub], type_ignores=[]), kind)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function" if kind != "typing" else kind)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == root or alias.name.startswith(root + "."):
                        add(_resolve(alias.name, modules), child.lineno, kind)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    origin = ".".join(base + ([child.module] if child.module else []))
                else:
                    origin = child.module or ""
                if origin != root and not origin.startswith(root + "."):
                    continue
                for alias in child.names:
                    add(_resolve(f"{origin}.{alias.name}", modules), child.lineno, kind)
            else:
                visit(child, kind)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "module")
    return found


def all_imports(package_dir: Path, root: str = ROOT) -> tuple[dict[str, Path], list[Import]]:
    modules = package_modules(package_dir)
    return modules, [imp for name, path in modules.items() for imp in module_imports(name, path, modules, root)]


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None: a depth-first search for an edge back into the path."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path, stack = [start], {start}, [iter(sorted(graph.get(start, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:  # every import of path[-1] explored
                stack.pop()
                node = path.pop()
                on_path.discard(node)
                done.add(node)
            elif nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def layer_index(name: str, layers: list[tuple[str, tuple[str, ...]]],
                only_itself: Iterable[str] = ONLY_ITSELF) -> int | None:
    """The layer of module `name`: the entry that is its name or its longest holding package."""
    best: tuple[int, int] | None = None  # (length of the entry, layer)
    for index, (_, entries) in enumerate(layers):
        for entry in entries:
            if name == entry or (entry not in only_itself and name.startswith(entry + ".")):
                if best is None or len(entry) > best[0]:
                    best = (len(entry), index)
    return None if best is None else best[1]


def upward(imports: Iterable[Import], layers: list[tuple[str, tuple[str, ...]]],
           only_itself: Iterable[str] = ONLY_ITSELF) -> list[Import]:
    """The imports from a lower layer to a higher one."""
    out = []
    for imp in imports:
        low, high = layer_index(imp.source, layers, only_itself), layer_index(imp.target, layers, only_itself)
        if low is not None and high is not None and high > low:
            out.append(imp)
    return out


def describe(imp: Import, layers: list[tuple[str, tuple[str, ...]]], modules: Mapping[str, Path] | None = None) -> str:
    where = f"{modules[imp.source].relative_to(PACKAGE_DIR.parent)}:{imp.line}" if modules else f"line {imp.line}"
    low, high = layer_index(imp.source, layers), layer_index(imp.target, layers)
    names = f" ({layers[low][0]} -> {layers[high][0]})" if low is not None and high is not None else ""
    return f"{imp.source} imports {imp.target}{names}, {where}"


@pytest.fixture(scope="module")
def parsed() -> tuple[dict[str, Path], list[Import]]:
    return all_imports(PACKAGE_DIR)


def test_every_module_has_a_layer(parsed):
    modules, _ = parsed
    missing = [name for name in modules if layer_index(name, LAYERS) is None]
    assert not missing, f"modules in no layer of LAYERS (give them a place): {missing}"
    entries = [entry for _, group in LAYERS for entry in group]
    unused = [entry for entry in entries if entry not in modules]
    assert not unused, f"LAYERS names modules that do not exist: {unused}"
    assert len(entries) == len(set(entries)), "a module is in two layers"


def test_no_import_cycles(parsed):
    _, imports = parsed
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.kind == "module":
            graph.setdefault(imp.source, set()).add(imp.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle at module level: " + " -> ".join(cycle or [])


def test_no_module_level_import_goes_up_the_layers(parsed):
    modules, imports = parsed
    bad = upward([imp for imp in imports if imp.kind == "module"], LAYERS)
    assert not bad, "imports up the layers:\n" + "\n".join(describe(imp, LAYERS, modules) for imp in bad)


def test_late_imports_up_the_layers_are_the_listed_late_bindings(parsed):
    modules, imports = parsed
    late = upward([imp for imp in imports if imp.kind != "module"], LAYERS)
    unlisted = [imp for imp in late if (imp.source, imp.target) not in LATE_BINDINGS]
    assert not unlisted, ("function-level imports up the layers that LATE_BINDINGS does not list (move the code "
                          "down, or list it with the reason it must be late):\n"
                          + "\n".join(describe(imp, LAYERS, modules) for imp in unlisted))
    stale = set(LATE_BINDINGS) - {(imp.source, imp.target) for imp in late}
    assert not stale, f"LATE_BINDINGS lists imports that no longer go up the layers: {sorted(stale)}"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def string_path_problems(modules: Mapping[str, Path], root: str = ROOT) -> list[str]:
    """The "mapo.module:object" string constants that name no module, or no top-level object of it."""
    bad = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            module, colon, obj = node.value.partition(":")
            if not colon or not module.startswith(root + ".") or not obj.isidentifier() or " " in module:
                continue
            if module not in modules:
                bad.append(f"{name}: {node.value!r} (no module {module})")
            elif obj not in _top_level_names(ast.parse(modules[module].read_text(encoding="utf-8"))):
                bad.append(f"{name}: {node.value!r} (no {obj} in {module})")
    return bad


def test_string_paths_name_existing_objects(parsed):
    """"mapo.module:object" strings (the registries' built-ins) name a module and a top-level object."""
    bad = string_path_problems(parsed[0])
    assert not bad, "string paths to nothing:\n" + "\n".join(bad)


# ---------------------------------------------------------------- the checker itself


def test_find_cycle_on_small_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is no cycle
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"a"}, "a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_planted_violations_are_caught(tmp_path):
    """A small package with a cycle, an import up the layers (module level, type only and in a
    function) and a string path to nothing: each is found."""
    pkg = tmp_path / "mapo"
    (pkg / "low").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "from mapo.low import b\n",
        "low/b.py": "import mapo.low.a\nfrom mapo import high\n",
        "low/c.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mapo.high import Thing\n"
                     "def late():\n    from mapo.high import Thing\n"),
        "low/d.py": "PATH = 'mapo.high:Missing'\n",
        "high.py": "from mapo.low.d import PATH\nclass Thing: ...\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    layers = [("root", ("mapo",)), ("low", ("mapo.low",)), ("high", ("mapo.high",))]
    modules, imports = all_imports(pkg)
    assert set(modules) == {"mapo", "mapo.low", "mapo.low.a", "mapo.low.b", "mapo.low.c", "mapo.low.d", "mapo.high"}
    kinds = {(imp.source, imp.target, imp.kind) for imp in imports}
    assert ("mapo.low.a", "mapo.low.b", "module") in kinds  # `from package import submodule`
    assert ("mapo.high", "mapo.low.d", "module") in kinds  # `from module import name`
    assert ("mapo.low.c", "mapo.high", "typing") in kinds and ("mapo.low.c", "mapo.high", "function") in kinds

    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.kind == "module":
            graph.setdefault(imp.source, set()).add(imp.target)
    assert find_cycle(graph) == ["mapo.low.a", "mapo.low.b", "mapo.low.a"]

    up = {(imp.source, imp.target, imp.kind) for imp in upward(imports, layers, ("mapo",))}
    assert up == {("mapo.low.b", "mapo.high", "module"), ("mapo.low.c", "mapo.high", "typing"),
                  ("mapo.low.c", "mapo.high", "function")}
    assert layer_index("mapo.low.a", layers, ("mapo",)) == 1 and layer_index("mapo", layers, ("mapo",)) == 0
    assert layer_index("mapo.other", layers, ("mapo",)) is None  # the root holds only itself
    assert string_path_problems(modules) == ["mapo.low.d: 'mapo.high:Missing' (no Missing in mapo.high)"]
