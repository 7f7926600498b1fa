"""docs/extending.md shows working plug-ins: every `# file:` block is written into a folder and
every other python block runs there, in order, in one namespace (as a reader would paste them),
so the examples of all five extension points are executed, not just shown."""

from __future__ import annotations

import re
import sys

from fixture_paths import REPO

from mapo.core.advantages import ESTIMATORS
from mapo.core.rewards import REWARD_KINDS

DOC = REPO / "docs" / "extending.md"
BLOCK = re.compile(r"```(python|yaml)\n(.*?)```", re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    return [(kind, body) for kind, body in BLOCK.findall(DOC.read_text(encoding="utf-8"))]


def test_every_extension_point_has_an_example():
    files = [body.splitlines()[0] for kind, body in _blocks() if kind == "python" and body.startswith("# file:")]
    assert files == [f"# file: my_plugins/{name}.py" for name in ("estimators", "rewards", "tutoring", "roles", "transport")]


def test_the_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])  # found as mapo finds it
    (tmp_path / "my_plugins").mkdir()
    (tmp_path / "my_plugins" / "__init__.py").write_text("")
    namespace: dict[str, object] = {"__name__": "extending_doc"}
    ran = 0
    try:
        for kind, body in _blocks():
            first = body.splitlines()[0]
            if kind == "yaml":
                name = re.match(r"# (\S+\.yaml):", first)
                if name:
                    (tmp_path / name.group(1)).write_text(body)
            elif first.startswith("# file:"):
                path = tmp_path / first.removeprefix("# file:").strip()
                path.write_text(body)
            else:
                exec(compile(body, f"{DOC}:block{ran}", "exec"), namespace)  # noqa: S102  (our own doc)
                ran += 1
    finally:  # forget the examples' modules and the names they registered
        for module in [m for m in sys.modules if m == "my_plugins" or m.startswith("my_plugins.")]:
            del sys.modules[module]
        ESTIMATORS.remove("clipped_mapo")
        REWARD_KINDS.remove("idr_arrival")
    assert ran == 6
