"""Optional training methods from related papers, each behind a config switch.

`compeer`: redundancy reweighting of rewards, structured-reasoning replies with a format reward.
`rapo`: hindsight selection of pivotal turns, verbal self-distillation from feedback.
Each attaches to the trainer through the hooks of `mapo.methods.base.TrainingMethod`.
See docs/methods.md for the config keys and what each costs.
"""

from __future__ import annotations

from typing import Any

from mapo.methods.base import TrainingMethod


def attached_methods(config: Any) -> list[TrainingMethod]:
    """The methods a TrainConfig turns on, in the order their hooks run."""
    from mapo.methods.compeer import Redundancy, StructuredReasoning
    from mapo.methods.rapo import Rapo

    methods = (Redundancy, StructuredReasoning, Rapo)  # rewards are reweighted before the format bonus
    return [method for cls in methods if (method := cls.from_config(config)) is not None]


__all__ = ["TrainingMethod", "attached_methods"]
