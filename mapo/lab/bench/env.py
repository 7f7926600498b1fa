"""`mapo bench env` and `mapo bench llm-env`: the simulated user's cost per turn.

`bench_env_latency`: the configured environment (by default the offline one: rules + sentence
embeddings; `--set env.options.roles.judge=learned` measures that judge) stepping fixed
replies, per-step latency percentiles, against the time the policy takes to write one reply
of the configured length (both in this process), so the ratio says how much of a rollout
turn the environment costs.

`bench_llm_env`: the same environment with all three roles on an LLM backend (a
local `vllm serve`), `trajectories` dialogues of `turns` turns run with 1 and
with `concurrency` dialogues in flight; the ratio is the throughput gain from
keeping the server busy (vLLM batches the requests in flight).
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mapo.config import TrainConfig
from mapo.engines.hf import HfEngine
from mapo.envs.base import system_prompt_for

# Fixed policy replies (ours), cycled through every dialogue.
REPLIES = (
    "That sounds exhausting, and it makes sense you feel worn down by it.",
    "It seems like what hurts most is feeling unseen after all the effort you put in.",
    "What would a small first step look like for you this week?",
    "You have handled hard things before; which of those strengths could help here?",
    "I hear how much this matters to you. What do you need most right now?",
)


def _percentiles(seconds: list[float]) -> dict[str, float]:
    a = np.asarray(seconds) * 1000.0
    return {"steps": float(a.size), "mean_ms": float(a.mean()), "p50_ms": float(np.percentile(a, 50)),
            "p90_ms": float(np.percentile(a, 90)), "max_ms": float(a.max())}


def step_latencies(make_env: Any, scenarios: list[Any], steps: int, turns: int) -> list[float]:
    """Seconds per `env.step` over `steps` steps, a new dialogue every `turns` steps or when one ends."""
    latencies: list[float] = []
    env, done, k = None, True, 0
    while len(latencies) < steps:
        if done or k % turns == 0:
            env = make_env()
            env.reset(scenarios[k % len(scenarios)], seed=k)
        start = time.perf_counter()
        done = env.step(REPLIES[k % len(REPLIES)]).done
        latencies.append(time.perf_counter() - start)
        k += 1
    return latencies


def judge_kind(config: TrainConfig) -> str | None:
    """The configured judge's kind for the empathy environment (offline unless env.options.roles says), else None."""
    if config.env.name != "empathy":
        return None
    judge = (config.env.options.get("roles") or {}).get("judge", "offline")
    # a mapping without a kind tunes the offline judge (mapo.envs.empathy.roles.make_role)
    return str(judge.get("kind", "offline")) if isinstance(judge, dict) else judge if isinstance(judge, str) else type(judge).__name__


def bench_env_latency(policy: Any, scenarios: list[Any], make_env: Any, config: TrainConfig,
                      steps: int = 40, turns: int = 8) -> dict[str, Any]:
    step_latencies(make_env, scenarios, 2, turns)  # warm-up: the embedding model loads off the clock
    env_row = _percentiles(step_latencies(make_env, scenarios, steps, turns))
    prompt = system_prompt_for(config.env.name, config.rollout.system_prompt)
    context = policy.first_prompt_ids(prompt, make_env().reset(scenarios[0], seed=0))  # the user's opening message
    engine = HfEngine(policy)
    engine.sample([context], 2)  # warm-up
    replies = []
    for _ in range(3):
        start = time.perf_counter()
        engine.sample([context], config.rollout.max_new_tokens, config.rollout.temperature)
        replies.append(time.perf_counter() - start)
    policy_row = _percentiles(replies)
    judge = judge_kind(config)
    return {
        "settings": {"steps": steps, "turns_per_dialogue": turns, "env": config.env.name, "judge": judge,
                     "reply_tokens_cap": config.rollout.max_new_tokens},
        "modes": {f"env step ({judge} judge)" if judge else "env step": env_row, "policy reply (batch 1)": policy_row},
        "ratios": {"policy_reply_over_env_step": policy_row["p50_ms"] / max(env_row["p50_ms"], 1e-9)},
    }


def llm_roles(base_url: str, model: str) -> dict[str, Any]:
    """All three roles on one OpenAI-compatible server (the judge's JSON constrained to its schema)."""
    spec = {"kind": "llm", "base_url": base_url, "model": model, "api_key_env": None, "timeout": 300.0}
    return {
        "judge": {**spec, "max_tokens": 200, "json_format": "json_schema"},
        "director": {**spec, "max_tokens": 100},
        "actor": {**spec, "max_tokens": 80},
    }


def _role_counts(env: Any) -> Counter[str]:
    """LLM calls and fallbacks of the empathy environment's roles (offline roles and other
    environments count nothing)."""
    from mapo.envs.empathy.env import EmpathyEnvironment

    counts: Counter[str] = Counter()
    roles = (env.judge, env.director, env.actor) if isinstance(env, EmpathyEnvironment) else ()
    for role in roles:
        role_counters = getattr(role, "counters", {})
        counts["llm_calls"] += role_counters.get("calls", 0)
        counts["fallbacks"] += role_counters.get("fallbacks", 0)
    return counts


def _dialogue(make_env: Any, scenario: Any, seed: int, turns: int) -> Counter[str]:
    env = make_env()
    env.reset(scenario, seed=seed)
    done = turns
    for t in range(turns):
        if env.step(REPLIES[(seed + t) % len(REPLIES)]).done:
            done = t + 1
            break
    return _role_counts(env) + Counter({"turns": done})


def run_dialogues(make_env: Any, scenarios: list[Any], trajectories: int, turns: int, concurrency: int) -> dict[str, float]:
    """`trajectories` dialogues, `concurrency` at a time: turns/s, and the LLM calls and fallbacks
    (a fallback is a fast fixed answer: a mode with more of them would look faster than it is)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        counts = sum(pool.map(lambda k: _dialogue(make_env, scenarios[k % len(scenarios)], k, turns), range(trajectories)),
                     Counter())
    seconds = time.perf_counter() - start
    return {"trajectories": float(trajectories), "turns": float(counts["turns"]), "seconds": seconds,
            "turns_per_s": counts["turns"] / seconds, "llm_calls": float(counts["llm_calls"]),
            "fallbacks": float(counts["fallbacks"])}


def bench_llm_env(config: TrainConfig, trajectories: int = 16, turns: int = 1, concurrency: int = 16,
                  server_cores: str = "0-1", base_url: str | None = None, model: str = "smollm2") -> dict[str, Any]:
    """Throughput of the LLM-role environment, 1 vs `concurrency` dialogues in flight.

    Starts `vllm serve` with the embedded SmolLM2 on `server_cores` unless `base_url` names a server.
    """
    from contextlib import nullcontext

    from mapo.envs.base import make_environment
    from mapo.envs.base import load_scenarios
    from mapo.testing.vllm_server import VllmServer

    scenarios = load_scenarios(config.env.name, config.env.scenarios)
    server = nullcontext() if base_url else VllmServer(alias=model, cores=server_cores)
    with server as running:
        url = base_url or running.base_url
        roles = llm_roles(url, model)

        def make_env() -> Any:
            return make_environment(config.env.name, roles=roles, max_turns=max(turns, 1))

        _dialogue(make_env, scenarios[0], 0, 1)  # warm-up: model load and prompt cache
        modes = {
            "1 in flight": run_dialogues(make_env, scenarios, trajectories, turns, 1),
            f"{concurrency} in flight": run_dialogues(make_env, scenarios, trajectories, turns, concurrency),
        }
    single, many = modes["1 in flight"], modes[f"{concurrency} in flight"]
    return {
        "settings": {"trajectories": trajectories, "turns": turns, "concurrency": concurrency,
                     "server": base_url or f"vllm serve, cores {server_cores}", "model": model},
        "modes": modes,
        "ratios": {"throughput_concurrent_over_single": many["turns_per_s"] / max(single["turns_per_s"], 1e-9)},
    }


LATENCY_COLUMNS = [
    ("steps", "samples", "{:.0f}"),
    ("mean_ms", "mean ms", "{:.1f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p90_ms", "p90 ms", "{:.1f}"),
    ("max_ms", "max ms", "{:.1f}"),
]
LLM_COLUMNS = [
    ("trajectories", "dialogues", "{:.0f}"),
    ("turns", "turns", "{:.0f}"),
    ("seconds", "seconds", "{:.1f}"),
    ("turns_per_s", "turns/s", "{:.3f}"),
    ("llm_calls", "LLM calls", "{:.0f}"),
    ("fallbacks", "fallbacks", "{:.0f}"),
]
