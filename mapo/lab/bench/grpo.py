"""`mapo bench grpo`: one single-turn GRPO step of ours against TRL's `GRPOTrainer`.

Both get the same model and LoRA adapters (two `load_policy` copies from one seed),
the same prompts (the configured environment's opening messages, from its `reset` on
the scenarios, under the rollout system prompt), the same reward function, group size,
reply cap, sampling temperature, learning rate, clip range and no KL term. Each runs a
warm-up step and then `timed` steps, of which the fastest counts (the machine is shared):
sampling + rewards + advantages + the update (+ our weight sync). Ours samples with the
run's rollout engine (`rollout.engine`, as `mapo train` would: vLLM with importance
correction when installed), then runs the library's step (`mapo.core.step.train_step`, the `grpo`
estimator); TRL's is its training step (generation included), timed by a callback. Sampled
replies differ in length between the two, so seconds per completion token is reported beside
the plain step time.

Ours is single-turn and sampled straight from the engine, a layout `mapo train` does not use:
no environment and no `mapo.core.rollout` (TRL has neither), and the reward is the shared function
of the reply's text, set on each turn, not a distance reward (train_step's `score_rewards=False`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import time
from typing import Any

import torch

from mapo.config import TrainConfig
from mapo.core.types import Group, Trajectory, Turn
from mapo.envs.base import environment_factory, system_prompt_for


def brevity_reward(text: str, target_words: int = 20) -> float:
    """The shared reward: 1 at `target_words` words, falling linearly to 0 at twice as far."""
    return max(0.0, 1.0 - abs(len(text.split()) - target_words) / target_words)


def trl_missing() -> str | None:
    """Why the TRL side cannot run here, or None."""
    if importlib.util.find_spec("trl") is None:
        return ("TRL is not installed: pip install trl (check first with `pip install --dry-run trl` that it "
                "keeps your torch and transformers)")
    return None


def _prompts(config: TrainConfig, scenarios: list[Any], count: int) -> list[list[dict[str, str]]]:
    """`count` single-turn chats: the rollout system prompt, then the user's opening message as the
    configured environment's `reset` gives it on the scenarios in turn."""
    make_env = environment_factory(config.env.name, config.env.options)
    system = system_prompt_for(config.env.name, config.rollout.system_prompt)
    return [
        [{"role": "system", "content": system},
         {"role": "user", "content": make_env().reset(scenarios[k % len(scenarios)], seed=config.seed + k)}]
        for k in range(count)
    ]


def _single_turn(k: int, group: int, prompt: list[dict[str, str]], context: list[int], sample: Any,
                 text: str) -> Trajectory:
    """Sample k (of prompt k // group) as a one-turn dialogue, its reply scored by the shared reward."""
    turn = Turn(1, prompt[1]["content"], response=text, reward=brevity_reward(text), prompt_length=len(context),
                response_ids=list(sample.ids), old_logprobs=list(sample.logprobs))
    return Trajectory(f"prompt-{k // group}", sample_index=k % group, turns=[turn], token_ids=list(context) + list(sample.ids))


def our_step(policy: Any, engine: Any, optimizer: torch.optim.Optimizer, prompts: list[list[dict[str, str]]],
             config: TrainConfig, group: int, max_new_tokens: int, step: int) -> dict[str, float]:
    """GRPO step `step` with mapo's parts; returns its seconds and the mean reward."""
    from mapo.core.step import train_step

    # the grpo estimator and one optimizer step, as TRL takes; the rewards are the shared function's
    grpo = dataclasses.replace(config, advantage=dataclasses.replace(config.advantage, estimator="grpo"),
                               optim=dataclasses.replace(config.optim, ppo_epochs=1, minibatches=1))
    start = time.perf_counter()
    engine.check_version(step - 1)
    contexts = [policy.first_prompt_ids(p[0]["content"], p[1]["content"]) for p in prompts for _ in range(group)]
    samples = engine.sample(contexts, max_new_tokens, config.rollout.temperature, config.rollout.top_p)
    replies = [_single_turn(k, group, prompts[k // group], c, s, policy.decode(s.ids))
               for k, (c, s) in enumerate(zip(contexts, samples))]
    groups = [Group(f"prompt-{i}", replies[i * group : (i + 1) * group]) for i in range(len(prompts))]
    train_step(policy, optimizer, groups, grpo, score_rewards=False)
    engine.sync(step)
    seconds, tokens = time.perf_counter() - start, float(sum(len(s.ids) for s in samples))
    rewards = [t.turns[0].reward for t in replies]
    return {"seconds": seconds, "reward_mean": sum(rewards) / len(rewards), "completions": float(len(samples)),
            "completion_tokens": tokens, "ms_per_completion_token": 1e3 * seconds / max(tokens, 1.0)}


def trl_steps(policy: Any, prompts: list[list[dict[str, str]]], config: TrainConfig, group: int,
              max_new_tokens: int, workdir: str, timed: int) -> dict[str, float]:
    """A warm-up and `timed` TRL GRPOTrainer steps on `policy.model`; returns the fastest timed step."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.logs: list[dict[str, float]] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.seconds.append(time.perf_counter() - self.start)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                self.logs.append(logs)

    def reward(completions: list[Any], **kwargs: Any) -> list[float]:
        return [brevity_reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    batch = len(prompts) * group
    args = GRPOConfig(
        output_dir=workdir, max_steps=1 + timed, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=group, max_completion_length=max_new_tokens, temperature=config.rollout.temperature,
        top_p=config.rollout.top_p, top_k=0, learning_rate=config.optim.lr, beta=0.0,
        epsilon=config.loss.eps_low, epsilon_high=config.loss.eps_high, num_iterations=1, steps_per_generation=1,
        loss_type="dapo", scale_rewards="group", max_grad_norm=config.optim.max_grad_norm, use_cpu=True,
        gradient_checkpointing=config.policy.gradient_checkpointing,  # TRL turns it on by default; ours is off
        bf16=False, fp16=False, report_to="none", save_strategy="no", logging_steps=1, disable_dropout=True,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=config.optim.weight_decay,
        adam_beta1=config.optim.betas[0], adam_beta2=config.optim.betas[1],
    )
    clock = StepClock()
    dataset = Dataset.from_list([{"prompt": p} for p in prompts] * (1 + timed))  # each step: every prompt once
    trainer = GRPOTrainer(model=policy.model, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=policy.tokenizer, callbacks=[clock])
    trainer.train()
    if len(clock.seconds) < 1 + timed or len(clock.logs) < 1 + timed:
        raise RuntimeError(f"TRL ran {len(clock.seconds)} steps ({len(clock.logs)} logged), expected {1 + timed}")
    best = min(range(1, 1 + timed), key=lambda k: clock.seconds[k])
    logs = clock.logs[best]
    tokens = float(logs.get("completions/mean_length", float("nan"))) * batch
    return {"seconds": clock.seconds[best], "reward_mean": float(logs["reward"]), "completions": float(batch),
            "completion_tokens": tokens, "ms_per_completion_token": 1e3 * clock.seconds[best] / tokens}


def bench_grpo(config: TrainConfig, scenarios: list[Any], prompts: int = 4, group: int = 4,
               max_new_tokens: int = 48, timed: int = 2) -> dict[str, Any]:
    """Warm-step seconds of ours and TRL's single-turn GRPO on identical settings; skips TRL with a reason."""
    import contextlib
    import tempfile

    from mapo.core.update import make_optimizer
    from mapo.engines.factory import make_engine
    from mapo.policy import load_policy

    chats = _prompts(config, scenarios, prompts)
    policy = load_policy(config.policy, seed=config.seed)
    optimizer = make_optimizer(policy, config.optim)
    torch.manual_seed(config.seed)
    engine = make_engine(config.rollout.engine, policy, slots=prompts * group,
                         context_per_slot=config.rollout.max_context_tokens, vllm=config.rollout.vllm)
    with contextlib.closing(engine):
        engine.sync(0)
        # step 1 is the warm-up
        steps = [our_step(policy, engine, optimizer, chats, config, group, max_new_tokens, k) for k in range(1, 2 + timed)]
        engine_name = engine.name
    modes = {"mapo": min(steps[1:], key=lambda step: step["seconds"])}
    del policy, optimizer
    settings = {"prompts": prompts, "group": group, "max_new_tokens": max_new_tokens, "timed_steps": timed,
                "lora": config.policy.lora.enabled, "threads": torch.get_num_threads(), "engine": engine_name}
    skipped = trl_missing()
    if skipped:
        return {"settings": settings, "modes": modes, "ratios": {}, "skipped": skipped}
    import trl

    settings["trl_version"] = trl.__version__
    torch.manual_seed(config.seed)
    with tempfile.TemporaryDirectory(prefix="mapo-trl-") as workdir:
        modes["trl"] = trl_steps(load_policy(config.policy, seed=config.seed), chats, config, group, max_new_tokens,
                                 workdir, timed)
    ratios = {"trl_over_mapo_seconds": modes["trl"]["seconds"] / max(modes["mapo"]["seconds"], 1e-9)}
    if all(math.isfinite(row["ms_per_completion_token"]) for row in modes.values()):
        ratios["trl_over_mapo_per_token"] = modes["trl"]["ms_per_completion_token"] / modes["mapo"]["ms_per_completion_token"]
    return {
        "settings": settings,
        "modes": modes,
        "ratios": ratios,
        "target": {"trl_over_mapo_seconds": 2.0},
    }


COLUMNS = [
    ("completions", "completions", "{:.0f}"),
    ("seconds", "step seconds (best warm)", "{:.2f}"),
    ("completion_tokens", "completion tokens", "{:.0f}"),
    ("ms_per_completion_token", "ms / completion token", "{:.1f}"),
    ("reward_mean", "mean reward", "{:.3f}"),
]
