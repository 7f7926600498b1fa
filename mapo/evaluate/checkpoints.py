"""Load a policy to evaluate from what `--model` names, including a training run's output.

Accepted: anything `mapo.model_source.PolicySpec.model` accepts (HF folder, .gguf file,
"embedded", "tiny"), a reference player of the questioning game ("player:optimal",
"player:random"; mapo.envs.questioning.players), or a run folder (`config.yaml` + `final/` or checkpoints), its
`final/` folder, or one checkpoint (`checkpoints/step-NNNNNN`, or its `policy/`).
A run's weights are loaded onto the base model its config.yaml names (LoRA adapters
need that base), with `Policy.load_trained`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mapo.sft.chain import chained_policy
from mapo.sft.outputs import FINAL, SFT_MARKER

_RUN_CONFIG = "config.yaml"


def _run_root(path: Path) -> Path | None:
    """The run folder holding `path` (itself or up to three levels up), if any."""
    for candidate in (path, *list(path.parents)[:3]):
        if (candidate / SFT_MARKER).is_file():
            return None  # inside an SFT run (also one a chained run holds): its final/ is a plain model
        if (candidate / _RUN_CONFIG).is_file() and ((candidate / "final").is_dir() or (candidate / "checkpoints").is_dir()):
            return candidate
    return None


def trained_weights(path: Path, run: Path) -> Path:
    """The folder of saved policy weights `path` points at inside `run`."""
    if path == run:
        if (run / "final").is_dir():
            return run / "final"
        from mapo.run_folder import RunFolder

        latest = RunFolder(run).latest_checkpoint()
        if latest is None:
            raise FileNotFoundError(f"{run}: a run folder with neither final/ nor a checkpoint to evaluate")
        return latest / "policy"
    if (path / "policy").is_dir():  # a checkpoint folder
        return path / "policy"
    if any(path.glob("*.safetensors")):
        return path
    raise FileNotFoundError(f"{path}: no policy weights (*.safetensors) here or in {path / 'policy'}")


def resolve_model(model: str) -> tuple[Any, Path | None, str, int]:
    """(PolicySpec of the base, weights folder or None, a short label, base seed) for `--model`.

    The seed matters for the "tiny" base, which is built from a seed: a run's adapters
    only fit the base it was trained on.
    """
    from mapo.model_source import LoraSpec, PolicySpec

    path = Path(model).expanduser()
    if (path / SFT_MARKER).is_file():  # an SFT run folder: the model it wrote
        model = str(path / FINAL)
    config = run_config(model)
    if config is None:
        return PolicySpec(model=model, lora=LoraSpec(enabled=False)), None, model, 0
    run = _run_root(path)
    assert run is not None
    weights = trained_weights(path, run)
    label = f"{run.name}/{weights.relative_to(run).as_posix()}"
    # device auto: a run trained on a GPU is evaluated wherever this command runs; a run with an
    # sft section trained on top of its SFT model (mapo.sft.chain)
    spec = replace(chained_policy(config, run), gradient_checkpointing=False, device="auto")
    return spec, weights, label, config.seed


def load_eval_policy(model: str, gguf_file: str | None = None, dtype: str | None = None, seed: int = 0) -> tuple[Any, str]:
    """(Policy in eval mode, label) for `--model` (see the module docstring); `player:<kind>` is a
    questioning-game reference player (text-only, seeded by `seed`)."""
    from mapo.envs.questioning.players import is_player, load_player
    from mapo.policy import load_policy

    if is_player(model):
        if gguf_file is not None or dtype is not None:
            raise ValueError(f"--gguf-file and --dtype do not apply to the reference player {model}")
        return load_player(model, seed), model

    spec, weights, label, seed = resolve_model(model)
    if gguf_file is not None:
        if weights is not None:
            raise ValueError(f"--gguf-file does not apply to a training run ({model})")
        spec = replace(spec, gguf_file=gguf_file)
        label = f"{model}/{gguf_file}"
    if dtype is not None:
        spec = replace(spec, dtype=dtype)
    policy = load_policy(spec, seed=seed)
    if weights is not None:
        policy.load_trained(weights)
    policy.model.eval()
    return policy, label


def run_config(model: str) -> Any | None:
    """The TrainConfig of the training run `model` points into, or None when it is not a run."""
    path = Path(model).expanduser()
    run = _run_root(path) if path.is_dir() else None
    if run is None:
        return None
    from mapo.config import load_config

    return load_config(run / _RUN_CONFIG)
