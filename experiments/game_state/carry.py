"""Carry an ablation's unfinished units from one session to the next, through the tracked tree.

    python -m experiments.game_state.carry pack RUN CARRY      # RUN's unfinished units -> CARRY
    python -m experiments.game_state.carry unpack CARRY RUN    # CARRY -> a new RUN, ready for --resume

Why: a new checkout has no runs/, and a MAPO unit of the state study runs longer than a session on
this 2-core machine (130 steps at 60-75 s a step, plus a check every 10). Finished units travel as
exports (mapo.lab.ablate.export); an unfinished one needs its latest checkpoint. A checkpoint is
27 MB (adapter 7.8, tokenizer 3.5, optimizer state 15.8), more than the tree can hold beside the rest
(tests/test_tree_size.py, 32 MiB), so the carry keeps the adapter as it is (float32) and Adam's two
moments in bfloat16 (half the bytes; 8 bits of mantissa on a running average, far below the
step-to-step change of the moments),
and leaves out the tokenizer file, 3.5 MB, where the run's policy rebuilds the same bytes: unpack
rebuilds it and checks its SHA-256. A resumed unit is therefore not bit-identical to
one never interrupted (nor is a unit resumed on another CPU: float32's last bits differ); every
other piece (metrics, the plateau rule's checks, the random generators' states) is carried exactly.

What is carried: the plan reduced to the unfinished units' variants and seeds, the base evaluation,
each unfinished unit's run files (gzip-compressed) and latest checkpoint, and its held-out checks so
far (eval.json only, as an export keeps them). Units that finished are not: export them first.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

import torch

from mapo.lab.ablate.export import RUN_FILES
from mapo.lab.ablate.plan import AblationPlan
from mapo.lab.ablate.state import EVAL, TRANSCRIPTS, eval_dir, read_eval, read_plan, run_dir, unit_trained
from mapo.run_folder import RunFolder

MANIFEST = "carry.json"
MOMENTS = ("exp_avg", "exp_avg_sq")  # AdamW's state tensors stored in bfloat16
LEFT_OUT = ("tokenizer.json",)  # rebuilt from the run's policy on unpack, where it saves the same bytes


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _gzip_copy(source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.with_name(dest.name + ".gz").write_bytes(gzip.compress(source.read_bytes(), compresslevel=9, mtime=0))


def _tokenizer_files(config: Path) -> dict[str, bytes]:
    """The files the tokenizer of the run configured by `config` (its config.yaml) saves: a
    checkpoint's copy of them is rebuilt from the policy's source, not carried."""
    import tempfile

    from mapo.config import load_config
    from mapo.model_source import load_tokenizer

    with tempfile.TemporaryDirectory() as folder:
        load_tokenizer(load_config(config).policy).save_pretrained(folder)
        return {name: (Path(folder) / name).read_bytes() for name in LEFT_OUT if (Path(folder) / name).is_file()}


def _cast_moments(state_file: Path, dest: Path, dtype: torch.dtype) -> None:
    state = torch.load(state_file, weights_only=False)
    for per_param in state["optimizer"]["state"].values():
        for key in MOMENTS:
            if key in per_param:
                per_param[key] = per_param[key].to(dtype)
    torch.save(state, dest)


def pack(run: Path, carry: Path) -> list[str]:
    """Write `run`'s unfinished units into `carry` (replaced); returns their names ([] and no folder:
    nothing to carry)."""
    plan = read_plan(run)
    open_units = [u for u in plan.units()
                  if (run_dir(run, u) / "config.yaml").is_file() and read_eval(eval_dir(run, u.name)) is None]
    shutil.rmtree(carry, ignore_errors=True)
    if not open_units:
        return []
    if len(open_units) > 1:  # 16 MB each: the tree holds one (tests/test_tree_size.py)
        raise ValueError(f"{len(open_units)} unfinished units ({', '.join(u.name for u in open_units)}); the tree "
                         "holds one carried unit: let the others finish, or stop them earlier, before packing")
    variants = sorted({u.variant for u in open_units}, key=plan.variants.index)
    reduced = AblationPlan.from_dict({**plan.to_dict(), "variants": variants, "seeds": sorted({u.seed for u in open_units})})
    finished = [u.name for u in reduced.units() if u not in open_units and unit_trained(run, plan, u)]
    if finished:
        raise ValueError(f"the carried plan's grid would hold {', '.join(finished)}, already trained: "
                         "run the units to carry one variant or one seed at a time")
    manifest: dict = {"units": [u.name for u in open_units], "moments_dtype": "bfloat16", "left_out": {}}
    carry.mkdir(parents=True)
    (carry / "plan.json").write_text(json.dumps(reduced.to_dict(), indent=2) + "\n", encoding="utf-8")
    for name in (EVAL, TRANSCRIPTS):
        if (eval_dir(run, "base") / name).is_file():
            _gzip_copy(eval_dir(run, "base") / name, eval_dir(carry, "base") / name)
    for unit in open_units:
        source, dest = run_dir(run, unit), run_dir(carry, unit)
        for name in RUN_FILES:
            if (source / name).is_file():
                _gzip_copy(source / name, dest / name)
        latest = RunFolder(source).latest_checkpoint()
        if latest is not None:
            target = dest / "checkpoints" / latest.name
            shutil.copytree(latest, target, ignore=shutil.ignore_patterns("trainer_state.pt"))
            _cast_moments(latest / "trainer_state.pt", target / "trainer_state.pt", torch.bfloat16)
            rebuilt = _tokenizer_files(source / "config.yaml")
            for found in [f for name in LEFT_OUT for f in target.rglob(name)]:
                if rebuilt.get(found.name) == found.read_bytes():  # else it travels in the carry
                    manifest["left_out"][str(found.relative_to(carry))] = {
                        "config": str(run_dir(carry, unit).relative_to(carry) / "config.yaml"), "sha256": _sha256(found.read_bytes())}
                    found.unlink()
        for check in sorted((eval_dir(run, unit.name) / "curve").glob(f"step-*/{EVAL}")):
            _gzip_copy(check, eval_dir(carry, unit.name) / check.relative_to(eval_dir(run, unit.name)))
    (carry / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest["units"]


def unpack(carry: Path, run: Path) -> list[str]:
    """Rebuild `carry`'s units as an ablation folder `run` (which must not exist yet) for
    `mapo ablate --resume`; returns their names."""
    if (run / "plan.json").exists():
        raise ValueError(f"{run} holds an ablation already; unpack into a new folder")
    manifest = json.loads((carry / MANIFEST).read_text(encoding="utf-8"))
    staging = run.with_name(run.name + ".unpacking")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(carry, staging, ignore=shutil.ignore_patterns(MANIFEST))
    for packed in staging.rglob("*.gz"):
        if packed.name == f"{EVAL}.gz" and packed.parent.parent.name == "curve":
            continue  # the checks stay as an export keeps them (read_eval reads either)
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
    for name, left in manifest["left_out"].items():
        rebuilt = _tokenizer_files(staging / left["config"]).get(Path(name).name, b"")
        if _sha256(rebuilt) != left["sha256"]:
            raise ValueError(f"{carry / name} was left out to be rebuilt from the run's policy, but this machine's "
                             "tokenizer saves other bytes; build the unit's warm start first "
                             "(experiments/game_state/build_warm_start.sh) with the same packages")
        (staging / name).write_bytes(rebuilt)
    for state_file in staging.glob("runs/*/checkpoints/*/trainer_state.pt"):
        _cast_moments(state_file, state_file, torch.float32)
    staging.rename(run)
    return manifest["units"]


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("pack", "unpack"):
        sys.exit(__doc__.split("\n\n")[1])
    action, a, b = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    units = pack(a, b) if action == "pack" else unpack(a, b)
    print(f"{action}ed {len(units)} unit(s): {', '.join(units) or 'none'}")
