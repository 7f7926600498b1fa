"""The lab: tooling that runs and reads experiments on top of the RL core, not part of training.

- `ablate` (`mapo ablate`): variants x seeds under one budget, evaluated and reported;
- `bench` (`mapo bench rollout|train|gpu|memory|suite ...`): speed benchmarks of mapo's own machinery;
- `blind` (`mapo compare --blind|--score-blind|--pool-blind`): blind side-by-side ratings of two
  runs' dialogues, and the measures taken on those sets afterwards.

Nothing is imported here.
"""
