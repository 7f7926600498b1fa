"""The tiny plateau plan several ablation tests train: one unit on the toy setting, evaluated after
every step. The toy's held-out success is 0 throughout (2 turns: the empathy task checks success from
turn 12), so with every=1, patience=2 the unit stops at step 3 of at most 6."""

from __future__ import annotations

from mapo.lab.ablate import AblationPlan, EvalBudget, PlateauStop


def toy_plateau_plan() -> AblationPlan:
    return AblationPlan(
        variants=["mapo-idr"], seeds=[0], steps=6,
        train=["rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
               "rollout.max_new_tokens=4", "checkpoint_every=5", "keep_checkpoints=1", "transcripts_every=0",
               "rollout.engine=hf"],  # auto would try vLLM first at every start: seconds a chunk here
        eval=EvalBudget(limit=1, max_turns=2, max_new_tokens=4, engine="hf"), stop=PlateauStop(every=1, patience=2),
    )
