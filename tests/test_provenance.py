"""mapo.provenance: the versions and machine written beside every run and evaluation."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from mapo.provenance import _git_commit, provenance, software_versions


def test_the_versions_are_the_installed_ones_and_a_missing_package_is_none(monkeypatch):
    found = software_versions()
    assert found["torch"] == torch.__version__ and found["python"].count(".") == 2
    monkeypatch.setattr("mapo.provenance.PACKAGES", ("torch", "surely-not-installed-package"))
    assert software_versions()["surely-not-installed-package"] is None
    record = provenance()
    assert set(record) == {"time", "software", "machine"} and record["machine"]["cores"] >= 1 and isinstance(record["machine"]["amx"], bool)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_commit_of_a_checkout_says_when_its_files_changed(tmp_path):
    assert _git_commit(tmp_path) is None  # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert _git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert _git_commit(tmp_path) == head + "+changes"
