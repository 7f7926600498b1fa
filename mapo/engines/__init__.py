"""Rollout engines: what samples the dialogues' replies (`rollout.engine`).

- ``hf``: the trainer's torch model itself (mapo.engines.hf);
- ``vllm``: vLLM in the trainer's process, weights reloaded after every optimizer step, its
  numerics corrected by truncated importance sampling (mapo.engines.vllm_engine,
  mapo.engines.importance).

This package's __init__ imports nothing heavy.
"""

ENGINES = ("hf", "vllm")
ENGINE_CHOICES = ("auto", *ENGINES)  # rollout.engine
