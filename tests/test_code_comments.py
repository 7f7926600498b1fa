"""The package's comments and docstrings say what the code does and why; study findings and the
issues behind them live in docs/ (issue 71, item 5). A reference to an issue number inside
mapo/ is the sign that a finding or a to-do was left in the code."""

from __future__ import annotations

import re
from pathlib import Path

import mapo

PACKAGE = Path(mapo.__file__).resolve().parent
CHECKED = (".py", ".md", ".yaml", ".yml", ".txt")
ISSUE = re.compile(r"issue\s+#?\d+", re.IGNORECASE)


def issue_references(root: Path) -> list[str]:
    """`path:line: text` for every line of a checked file under `root` that names an issue number."""
    hits = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in CHECKED or "__pycache__" in path.parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ISSUE.search(line):
                hits.append(f"{path.relative_to(root.parent)}:{number}: {line.strip()}")
    return hits


def test_no_file_of_the_package_names_an_issue_number():
    hits = issue_references(PACKAGE)
    assert not hits, "move the finding to docs/ and keep a short why in the code:\n" + "\n".join(hits)


def test_the_check_finds_an_issue_number_in_code_and_in_data(tmp_path):
    package = tmp_path / "pkg"
    (package / "data").mkdir(parents=True)
    (package / "mod.py").write_text('"""Fine."""\nx = 1  # issue 59\'s seed 2 re-asked 37 %\n', encoding="utf-8")
    (package / "data" / "README.md").write_text("Written for Issue #27, item 2(b).\n", encoding="utf-8")
    (package / "data" / "cases.yaml").write_text("note: an issue of seed 3 is not an issue number\n", encoding="utf-8")
    (package / "data" / "blob.bin").write_text("issue 1\n", encoding="utf-8")
    assert issue_references(package) == [
        "pkg/data/README.md:1: Written for Issue #27, item 2(b).",
        "pkg/mod.py:2: x = 1  # issue 59's seed 2 re-asked 37 %",
    ]
