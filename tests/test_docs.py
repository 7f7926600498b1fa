"""The docs and hints say what works: install commands that exist, Hydra overrides verl accepts,
and the methods page as the code behaves."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
VERL_DOC = ROOT / "docs" / "verl.md"
EXAMPLE = ROOT / "examples" / "verl"


def _texts() -> dict[Path, str]:
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("mapo/**/*.py"), *ROOT.glob("examples/**/*"),
             *ROOT.glob("scripts/*"), *ROOT.glob("tests/*.py")]
    return {f: f.read_text(encoding="utf-8") for f in files if f.is_file() and f != Path(__file__).resolve()}


def test_no_install_command_names_the_unpublished_distribution():
    # mapo-rl is not on PyPI: `pip install mapo-rl[...]` would fetch nothing (or someone else's package)
    published = re.compile(r"pip install[^\n`]*['\" ]mapo-rl\b")
    offenders = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path, text in _texts().items()
                 for m in published.finditer(text)]
    assert offenders == []


def _keys(tree: object, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return set()
    out = set()
    for key, value in tree.items():
        out.add(prefix + str(key))
        out |= _keys(value, f"{prefix}{key}.")
    return out


def _script_overrides() -> set[str]:
    script = (EXAMPLE / "run_qwen7b_one_node.sh").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^\s+\+{0,2}([\w.]+)=", script, re.MULTILINE)}


def test_verl_doc_adds_with_plus_only_keys_the_example_does_not_set():
    # Hydra's `+key=value` fails when the config (or an earlier override) already has the key
    defined = _keys(yaml.safe_load((EXAMPLE / "mapo_empathy_qwen7b.yaml").read_text(encoding="utf-8")))
    defined |= _script_overrides()
    assert "algorithm.mapo.alpha" in defined and "ray_kwargs.ray_init.runtime_env.env_vars.MAPO_JUDGE_URL" in defined
    added = re.findall(r"(?<![+\w])\+([a-z_][\w.]*)=", VERL_DOC.read_text(encoding="utf-8"))
    assert [key for key in added if key in defined] == []


def test_methods_doc_says_checkpoints_keep_the_ema_teacher():
    text = " ".join((ROOT / "docs" / "methods.md").read_text(encoding="utf-8").split())
    assert "Checkpoints keep the EMA teacher" in text  # mapo.core.trainer saves Rapo.state_dict() (test_methods_train)
    assert "restarted from the current weights when a run is resumed" not in text


def test_readme_is_a_front_page_whose_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    # markdown links and images, and the `docs/...`, `examples/...`, `scripts/...` paths it names
    targets = re.findall(r"\]\(([^)#\s]+)\)", readme)
    targets += re.findall(r"`((?:docs|examples|scripts|mapo/data)/[\w./-]+?)`", readme)
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert targets and missing == []
