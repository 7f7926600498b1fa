"""Evaluation.

- `runner` (`mapo eval`): the EMPA-style multi-turn benchmark, scored by `empa`;
- `emobench`, `eqbench` (`mapo bench emobench|eqbench`): the public single-turn
  benchmarks with their authors' scoring, sharing `bench` and `responders`;
- `compare` (`mapo compare`): results side by side with deltas;
- `checkpoints`: loading a training run's policy.

The blind side-by-side ratings (`mapo compare --blind`) are mapo.lab.blind.

The run report (`mapo report`) and the transcript viewer are mapo.report.
"""
