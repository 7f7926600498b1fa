"""Rollout engines: what samples the dialogues' replies (`rollout.engine`).

- ``hf``: the trainer's torch model itself (mapo.engines.hf);
- ``llamacpp``: llama.cpp in a worker process, weights synced after every optimizer
  step, its numerics corrected by truncated importance sampling (mapo.engines.llamacpp,
  mapo.engines.importance).

This package's __init__ imports nothing heavy: the llama.cpp worker process imports
`mapo.engines.llamacpp_worker` without torch.
"""

ENGINES = ("hf", "llamacpp")
ENGINE_CHOICES = ("auto", *ENGINES)  # rollout.engine
