"""mapo: multi-turn dialogue RL with process rewards (MAPO and baselines).

`mapo.train` runs a whole training run from Python; `mapo.core.step` has the train step's parts
(rewards -> advantages -> sequences -> update) for a loop of your own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mapo.config import TrainConfig
    from mapo.core.trainer import TrainingResult

__version__ = "0.1.0"


def train(
    config: TrainConfig | str | Path | None = None, *, output: str | Path | None = None, resume: str | Path | None = None,
    overrides: Sequence[str] = (), show_progress: bool = True,
) -> TrainingResult:
    """Train (or resume) a policy; returns the run folder, its summary and every step's metrics.

    The same as `mapo train` on the command line, and `mapo.core.trainer.train` (which says what each
    argument takes). For example:

        import mapo

        # a bundled config by name, a YAML path, or a mapo.config.TrainConfig; overrides as --set
        result = mapo.train("default", overrides=["steps=2", "rollout.max_turns=4"], output="runs/first")
        print(result.run_dir)                        # config.yaml, metrics.jsonl, checkpoints/, final/
        print(result.final_metrics["reward_mean"])   # the last step's metrics (loss, kl, success_rate, ...)
        for line in result.summary:                  # what `mapo train` prints at the end
            print(line)

        # two more steps from the run's latest checkpoint, with its own config.yaml
        mapo.train(resume=result.run_dir, overrides=["steps=4"])

    One step on its own, without the trainer: `mapo.core.step.train_step` (its module docstring has
    the example). tests/test_python_api.py runs both on the tiny test model.
    """
    from mapo.core.trainer import train as run_training  # imported here so `import mapo` stays light

    return run_training(config, output, resume, overrides, show_progress)
