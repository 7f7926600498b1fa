"""SFT then RL in one run: a training config whose `sft.train_file` is set.

`mapo train` first runs the `sft` section in `<run>/sft/` (an SFT run folder of its own,
resumable), starting from `policy.model`; RL then starts from `<run>/sft/final` with a
fresh LoRA (or full fine-tuning) as the `policy` section says. The run's config.yaml
keeps `policy.model` as written (the SFT's starting point): RL's base is always
`<run>/sft/final`, also for `mapo eval` of the run and for a resume, which skips the SFT
stage once that folder is complete.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mapo.config import TrainConfig
from mapo.model_source import PolicySpec
from mapo.sft.outputs import FINAL

SFT_FOLDER = "sft"


def sft_enabled(config: TrainConfig) -> bool:
    return config.sft.train_file is not None


def chained_policy(config: TrainConfig, run: Path) -> PolicySpec:
    """The `policy` section RL trains: itself, or with an sft section the SFT output of `run`."""
    if not sft_enabled(config):
        return config.policy
    return replace(config.policy, model=str(Path(run) / SFT_FOLDER / FINAL), gguf_file=None, tokenizer=None)


def check_chain(config: TrainConfig) -> None:
    """Fail fast, before any folder is written or SFT runs: the SFT data, the base model, RL's scenarios."""
    from mapo.envs.base import load_scenarios
    from mapo.model_source import resolve_source
    from mapo.sft.data import train_and_held_out

    train_and_held_out(config.sft, config.seed)
    resolve_source(config.policy)
    load_scenarios(config.env.name, config.env.scenarios)


def warm_start(config: TrainConfig, run: Path, show_progress: bool = True) -> TrainConfig:
    """The config RL trains with: unchanged without an sft section; else SFT is run (or resumed) in
    `run/sft` unless its final model is there, and `policy.model` becomes that model."""
    if not sft_enabled(config):
        return config
    from mapo.sft.trainer import run_sft

    folder = Path(run) / SFT_FOLDER
    if not (folder / FINAL / "config.json").is_file():
        if (folder / "config.yaml").is_file():
            run_sft(resume=folder, show_progress=show_progress)
        else:
            run_sft(config, output=folder, show_progress=show_progress)
    return replace(config, policy=chained_policy(config, run))
