"""The RL core: one training step's data flow, and the loop around it.

    Scenario -> rollout -> Trajectory / Group -> rewards -> advantages -> losses -> update

- `types`: the plain dataclasses every stage passes along (Scenario, Turn, Trajectory, Group);
- `rollout`: batched multi-turn dialogues of the policy with an environment, token ids kept;
- `rewards`: per-turn rewards from each dialogue's distances (IDR, ADR, outcome);
- `advantages` (its input `advantage_input`, the state-keyed estimator `advantage_state`):
  MAPO's mixed advantage and the baselines;
- `losses`: the training sequences and the clipped policy-gradient loss;
- `update`: the optimizer and the update on those sequences;
- `step`: one training step as plain functions (rewards -> advantages -> sequences -> update);
- `trainer`: the loop (scenario sampling, rollout, step, logging, checkpoints, resume).

Nothing is imported here, so `import mapo.core.types` stays light (no torch).
"""
