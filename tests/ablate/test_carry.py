"""Carrying an unfinished unit to the next session (experiments/game_state/carry.py): packed smaller,
unpacked into a folder that `run_unit` resumes from its checkpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from experiments.game_state.carry import MANIFEST, pack, unpack
from mapo.lab.ablate import Unit, check_plan, run_dir, run_unit
from mapo.lab.ablate.state import curve_dir, read_eval
from mapo.run_folder import RunFolder, read_metrics
from toy_plan import toy_plateau_plan


@pytest.mark.slow  # about 40 s: two chunks of a tiny unit and their checks (CI runs the slow tests)
def test_an_unfinished_unit_is_carried_smaller_and_resumes_where_it_paused(tmp_path):
    extra = ["policy.model=tiny", "policy.lora.r=4", "optim.lr=0.01"]
    plan, unit = toy_plateau_plan(), Unit("mapo-idr", 0)
    first = tmp_path / "first"
    first.mkdir()
    check_plan(first, plan)
    did = run_unit(first, plan, unit, None, extra, show_progress=False, chunks=1)
    assert did == "trained+evaluated+paused at step 1"

    assert pack(first, tmp_path / "carry") == ["mapo-idr-s0"]
    manifest = json.loads((tmp_path / "carry" / MANIFEST).read_text())
    [left_out] = manifest["left_out"]
    assert left_out.endswith("policy/tokenizer.json") and not (tmp_path / "carry" / left_out).exists()
    latest = RunFolder(run_dir(first, unit)).latest_checkpoint()
    packed = torch.load(tmp_path / "carry" / "runs" / unit.name / "checkpoints" / latest.name / "trainer_state.pt",
                        weights_only=False)
    assert {t["exp_avg"].dtype for t in packed["optimizer"]["state"].values()} == {torch.bfloat16}

    if shutil.which("git"):  # committed where study.sh puts it, no file of the carry may be git-ignored
        root = Path(__file__).resolve().parents[2]
        packed_files = [f"experiments/game_state/carry-tight/{f.relative_to(tmp_path / 'carry')}"
                        for f in (tmp_path / "carry").rglob("*") if f.is_file()]
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", *packed_files], capture_output=True, text=True)
        assert ignored.stdout == "", f"git would leave out of the carry: {ignored.stdout}"

    second = tmp_path / "second"
    assert unpack(tmp_path / "carry", second) == ["mapo-idr-s0"]
    restored = second / "runs" / unit.name / "checkpoints" / latest.name
    assert (restored / "policy" / "tokenizer.json").read_bytes() == (latest / "policy" / "tokenizer.json").read_bytes()
    kept, back = (load_file(f / "policy" / "adapter_model.safetensors") for f in (latest, restored))
    assert kept.keys() == back.keys() and all(torch.equal(kept[k], back[k]) for k in kept)  # the adapter exactly
    was, now = (torch.load(f / "trainer_state.pt", weights_only=False) for f in (latest, restored))
    for key, moments in was["optimizer"]["state"].items():
        assert now["optimizer"]["state"][key]["exp_avg_sq"].dtype == torch.float32
        torch.testing.assert_close(now["optimizer"]["state"][key]["exp_avg"], moments["exp_avg"], rtol=2**-8, atol=0)
    assert torch.equal(now["rng"]["torch"], was["rng"]["torch"])
    assert read_metrics(run_dir(second, unit)) == read_metrics(run_dir(first, unit))
    assert read_eval(curve_dir(second, unit.name, 1)) == read_eval(curve_dir(first, unit.name, 1))

    did = run_unit(second, plan, unit, None, extra, show_progress=False, chunks=1)
    assert did == "resumed+evaluated+paused at step 2"
    assert [m["step"] for m in read_metrics(run_dir(second, unit))] == [1, 2]
    with pytest.raises(ValueError, match="holds an ablation already"):
        unpack(tmp_path / "carry", second)


def test_nothing_to_carry_leaves_no_carry(tmp_path):
    (tmp_path / "run").mkdir()
    check_plan(tmp_path / "run", toy_plateau_plan())
    (tmp_path / "carry").mkdir()
    assert pack(tmp_path / "run", tmp_path / "carry") == [] and not (tmp_path / "carry").exists()
