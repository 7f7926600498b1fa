"""Batched multi-turn rollouts: B scenarios x N trajectories, token ids kept end to end.

On an engine that batches continuously (mapo.engines.base.ContinuousEngine: vLLM), a dialogue's
next reply is submitted as soon as its environment has answered, so short replies never wait for
a long one; each reply's seed is its dialogue's and turn's, drawn from one torch draw per rollout.
Otherwise in waves: at every turn index the still-active dialogues are sampled together in one
batched engine call, then their environments step concurrently (LLM-backed roles do HTTP). Each dialogue's ids grow incrementally: the rendered prompt of each new user
message (tokenised once) is appended, then the sampled reply ids as they are (plus
the end-of-turn id when the reply was cut at `max_new_tokens`). So the ids a turn is
trained on are, by construction, the ids that were sampled.

An environment may supply its own context for the next reply (`Environment.reply_context`, e.g.
the game's state): the policy then reads the system prompt, the last `history_window` exchanges
and that message instead of the whole transcript, each reply is sampled from (and trained on)
its own context (`Turn.context_ids`), and the transcript still records the whole dialogue.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from mapo.core.types import Group, Scenario, Trajectory, Turn
from mapo.engines import ENGINE_CHOICES
from mapo.engines.base import ContinuousEngine, KVCache, ReplyRequest, RolloutEngine, Sample
from mapo.engines.hf import HfEngine
from mapo.engines.vllm_setup import VllmSpec
from mapo.envs.base import Environment, environment_system_prompt, reply_context
from mapo.policy import Policy

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class RolloutSpec:
    """How dialogues are sampled (the trainer's `rollout` config section)."""

    scenarios_per_step: int = 2  # B
    samples_per_scenario: int = 4  # N, the group size
    max_turns: int = 3  # per-trajectory cap (EMPA evaluates up to 45)
    # A reply ends at end-of-turn, after max_sentences sentences (the prompt asks for two or three;
    # SmolLM2-135M rambles on), or at the max_new_tokens cap, which then cuts it mid-sentence.
    max_new_tokens: int = 96
    max_sentences: int | None = 3
    max_context_tokens: int = 2048
    # exchanges kept before the environment's own context for the next reply, when it gives one
    # (Environment.reply_context); 0: that context alone. Environments without one read the transcript.
    history_window: int = 0
    temperature: float = 0.7  # SmolLM2-135M is incoherent at 1.0; log-probs are of the tempered policy
    top_p: float = 1.0
    system_prompt: str | None = None  # None: the environment's own (its `system_prompt` attribute)
    env_workers: int = 8
    reuse_cache: bool = True  # keep each dialogue's attention cache between turns (no re-prefill of history)
    # what samples the replies (mapo.engines): auto = vllm when it is installed and has the policy's
    # architecture, else hf (said once); hf | vllm as asked
    engine: str = "auto"
    vllm: VllmSpec = field(default_factory=VllmSpec)

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_CHOICES:
            raise ValueError(f"rollout.engine must be one of {', '.join(ENGINE_CHOICES)}, got {self.engine!r}")
        for name in ("scenarios_per_step", "samples_per_scenario", "max_turns", "max_new_tokens", "env_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be at least 1, got {getattr(self, name)}")
        if not isinstance(self.history_window, int) or self.history_window < 0:
            raise ValueError(f"rollout.history_window must be an integer >= 0, got {self.history_window!r}")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ValueError(f"rollout.max_sentences must be at least 1 or null, got {self.max_sentences}")
        if not self.temperature > 0 or not math.isfinite(self.temperature):
            raise ValueError(f"rollout.temperature must be a finite number > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"rollout.top_p must be in (0, 1], got {self.top_p}")
        if self.max_context_tokens <= self.max_new_tokens:
            raise ValueError(
                f"rollout.max_context_tokens ({self.max_context_tokens}) must exceed "
                f"rollout.max_new_tokens ({self.max_new_tokens})"
            )


@dataclass
class _Dialogue:
    scenario: Scenario
    env: Environment
    trajectory: Trajectory
    user_message: str = ""
    done: bool = False
    cache: KVCache | None = None
    # the environment's context for the next reply (reply_context); None: the transcript
    context_message: str | None = None
    context_ids: list[int] | None = None  # that context as the policy's ids


def _map(pool: ThreadPoolExecutor | None, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    if pool is None or len(items) < 2:
        return [fn(x) for x in items]
    return list(pool.map(fn, items))


# ---- text-only policies (evaluation of an OpenAI-compatible endpoint): replies without ids or log-probs


class ChatPolicy(Protocol):
    """A policy known only by its reply texts; its rollouts can be evaluated, not trained on."""

    def chat_replies(
        self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[str]: ...


def _messages(d: _Dialogue, history_window: int) -> list[dict[str, str]]:
    """What the policy reads for its next reply as chat messages: the dialogue so far, or under the
    environment's own context the last `history_window` exchanges and that context."""
    system_prompt = d.trajectory.system_prompt
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for turn in _history(d, history_window):
        messages += [{"role": "user", "content": turn.user_message}, {"role": "assistant", "content": turn.response}]
    last = d.user_message if d.context_message is None else d.context_message
    return messages + [{"role": "user", "content": last}]


def _history(d: _Dialogue, history_window: int) -> list[Turn]:
    """The exchanges the policy reads before its next reply's last message."""
    turns = d.trajectory.turns
    if d.context_message is None:
        return turns
    return turns[len(turns) - history_window :] if history_window else []


def _context_ids(policy: Policy, d: _Dialogue, history_window: int) -> list[int]:
    """The environment's context as ids: the kept exchanges (their replies as sampled) and its message."""
    kept = _history(d, history_window)
    if not kept:
        return policy.first_prompt_ids(d.trajectory.system_prompt, str(d.context_message))
    ids = policy.first_prompt_ids(d.trajectory.system_prompt, kept[0].user_message)
    for turn, following in zip(kept, [*(t.user_message for t in kept[1:]), str(d.context_message)]):
        ids = ids + turn.response_ids
        if turn.response_ids[-1:] != [policy.end_of_turn_id]:
            ids.append(policy.end_of_turn_id)
        ids = ids + policy.next_prompt_ids(following)
    return ids


def _set_context(policy: Any, d: _Dialogue, spec: RolloutSpec, text_only: bool) -> None:
    """Ask the environment for its context for the next reply, and render it."""
    d.context_message = reply_context(d.env)
    if d.context_message is not None and not text_only:
        d.context_ids = _context_ids(policy, d, spec.history_window)
        d.cache = None  # each context is its own sequence; a kept cache is of another


def _distance(info: dict[str, Any], state: tuple[float, ...]) -> float:
    if "distance" in info:
        return float(info["distance"])
    if not state:
        raise ValueError("environment step info has neither 'distance' nor 'state'; rewards need D_t")
    return math.sqrt(sum(x * x for x in state))


def _initial_distance(info: dict[str, Any], scenario_id: str) -> float:
    """D_0 from the first step's info when P_0 is unknown; without either the first reward would use D_0 = 0."""
    if "initial_distance" not in info:
        raise ValueError(
            f"scenario {scenario_id!r}: the environment reports no 'state' and the scenario no initial_state, "
            "so D_0 is unknown and the first IDR reward (and the outcome reward) would be wrong; give the "
            "scenario an initial_state (P_0), report 'state' in the step info, or report 'initial_distance' (D_0) "
            "in the first step's info"
        )
    return float(info["initial_distance"])


def rollout(
    policy: Policy | ChatPolicy,
    scenarios: Sequence[Scenario],
    make_env: Callable[[], Environment],
    spec: RolloutSpec,
    seed: int = 0,
    pool: ThreadPoolExecutor | None = None,
    timings: dict[str, float] | None = None,
    on_turn: Callable[[int, int, int], None] | None = None,
    engine: RolloutEngine | None = None,
) -> list[Group]:
    """Sample `spec.samples_per_scenario` dialogues of every scenario, all turns batched.

    The caller seeds torch for the sampling; environment k gets seed `seed + k`.
    Returns one Group per scenario, in order. Turns carry the sampled ids, their
    log-probs, v_t, P_t, D_t and the env's info; rewards are left to the trainer.
    `timings`, if given, accumulates the seconds spent in "generate" and "env".
    A `ChatPolicy` (no `sample`) gets the dialogue as chat messages and leaves the
    turns' ids and log-probs empty. `on_turn(t, sampled, still_going)`, if given, is
    called after every turn (progress bars). `engine`, if given, samples the replies
    (mapo.engines: token ids in, ids and log-probs out); the policy still renders the prompts.
    """
    text_only = hasattr(policy, "chat_replies") and not isinstance(policy, Policy)
    timings = {} if timings is None else timings
    timings.setdefault("generate", 0.0)
    timings.setdefault("env", 0.0)
    clock = time.perf_counter()
    n = spec.samples_per_scenario
    dialogues = []
    for scenario in scenarios:
        for i in range(n):
            env = make_env()
            trajectory = Trajectory(
                scenario_id=scenario.id,
                sample_index=i,
                initial_state=tuple(scenario.initial_state or ()),
                system_prompt=spec.system_prompt if spec.system_prompt is not None else environment_system_prompt(env),
            )
            dialogues.append(_Dialogue(scenario, env, trajectory))

    openings = _map(pool, lambda k: dialogues[k].env.reset(dialogues[k].scenario, seed=seed + k), range(len(dialogues)))
    timings["env"] += time.perf_counter() - clock
    for d, opening in zip(dialogues, openings):
        d.user_message = opening
        _set_context(policy, d, spec, text_only)
        if not text_only and d.context_message is None:
            d.trajectory.token_ids = policy.first_prompt_ids(d.trajectory.system_prompt, opening)

    if isinstance(engine, ContinuousEngine) and not text_only:
        _roll_continuously(policy, dialogues, engine, spec, pool, timings, on_turn)
    else:
        _roll_in_waves(policy, dialogues, engine, spec, pool, timings, on_turn, text_only)

    groups = []
    for s, scenario in enumerate(scenarios):
        groups.append(Group(scenario.id, [d.trajectory for d in dialogues[s * n : (s + 1) * n]]))
    return groups


def _prompt_ids(d: _Dialogue) -> list[int]:
    """The ids the next reply is sampled after: its own context, or the dialogue so far."""
    return d.trajectory.token_ids if d.context_ids is None else d.context_ids


def _has_room(d: _Dialogue, spec: RolloutSpec, t: int) -> bool:
    """Whether turn `t`'s reply fits the context; a dialogue without room ends (the opening: an error)."""
    if len(_prompt_ids(d)) + spec.max_new_tokens <= spec.max_context_tokens:
        return True
    if t == 1:
        raise ValueError(
            f"scenario {d.scenario.id!r}: the opening prompt is {len(_prompt_ids(d))} tokens, "
            f"too long for rollout.max_context_tokens={spec.max_context_tokens} with "
            f"rollout.max_new_tokens={spec.max_new_tokens}"
        )
    d.done, d.cache, d.trajectory.done_reason = True, None, "context_limit"
    return False


def _record_reply(policy: Any, d: _Dialogue, t: int, sample: Sample, response: str, text_only: bool) -> Turn:
    """Turn `t` of `d` with its sampled reply; the reply's ids join the dialogue's (or, under the
    environment's own context, the turn keeps the context it was sampled from)."""
    ids = _prompt_ids(d)
    turn = Turn(
        index=t,
        user_message=d.user_message,
        response=response,
        prompt_length=len(ids),
        response_ids=list(sample.ids),
        old_logprobs=list(sample.logprobs),
        truncated=sample.truncated,
        context_message=d.context_message,
    )
    if d.context_message is not None:
        turn.context_ids = None if text_only else list(ids)
        return turn
    ids.extend(sample.ids)
    d.cache = sample.cache
    if not text_only and sample.ids[-1:] != [policy.end_of_turn_id]:
        # cut by the cap or ended by the sentence limit: close the turn as the template
        # would; this id is context, not trained
        ids.append(policy.end_of_turn_id)
    return turn


def _record_step(policy: Any, d: _Dialogue, t: int, turn: Turn, result: Any, spec: RolloutSpec, text_only: bool) -> None:
    """The environment's answer to turn `t`: the turn's action, state and distance, and the dialogue's
    next prompt (or its end)."""
    info = dict(result.info)
    turn.action = tuple(float(x) for x in result.action)
    turn.state = tuple(float(x) for x in info.get("state", ()))
    turn.distance = _distance(info, turn.state)
    turn.levels = dict(info.get("levels") or {})
    turn.info = info
    if t == 1 and turn.state and len(turn.state) == len(turn.action):
        # P_0 = P_1 - v_1: the start the env actually used (some draw it at reset)
        d.trajectory.initial_state = tuple(s - a for s, a in zip(turn.state, turn.action))
    if t == 1 and not d.trajectory.initial_state:
        d.trajectory.initial_distance = _initial_distance(info, d.scenario.id)
    d.trajectory.turns.append(turn)
    if result.done:
        d.done, d.cache = True, None
        d.trajectory.done_reason = info.get("done_reason") or "done"
    elif t == spec.max_turns:
        d.done, d.cache = True, None
        d.trajectory.done_reason = "max_turns"
    else:
        d.user_message = result.user_message
        _set_context(policy, d, spec, text_only)
        if not text_only and d.context_message is None:
            d.trajectory.token_ids.extend(policy.next_prompt_ids(result.user_message))


def _roll_in_waves(
    policy: Any, dialogues: list[_Dialogue], engine: RolloutEngine | None, spec: RolloutSpec,
    pool: ThreadPoolExecutor | None, timings: dict[str, float], on_turn: Callable[[int, int, int], None] | None,
    text_only: bool,
) -> None:
    """Turn by turn: every active dialogue's reply in one batched call, then every environment step."""
    for t in range(1, spec.max_turns + 1):
        active = [d for d in dialogues if not d.done and _has_room(d, spec, t)]
        if not active:
            break
        clock = time.perf_counter()
        if text_only:
            replies = policy.chat_replies(
                [_messages(d, spec.history_window) for d in active], spec.max_new_tokens, spec.temperature, spec.top_p
            )
            samples = [Sample([], [], truncated=False) for _ in active]
        else:
            reuse = spec.reuse_cache and all(d.context_message is None for d in active)
            samples = (engine or HfEngine(policy)).sample(
                [_prompt_ids(d) for d in active],
                spec.max_new_tokens,
                spec.temperature,
                spec.top_p,
                caches=[d.cache for d in active] if reuse else None,
                keep_cache=reuse and t < spec.max_turns,
                max_sentences=spec.max_sentences,
            )
            replies = [policy.decode(sample.ids) for sample in samples]
        timings["generate"] += time.perf_counter() - clock
        turns = [_record_reply(policy, d, t, sample, reply, text_only) for d, sample, reply in zip(active, samples, replies)]
        clock = time.perf_counter()
        results = _map(pool, lambda pair: pair[0].env.step(pair[1].response), list(zip(active, turns)))
        timings["env"] += time.perf_counter() - clock
        for d, turn, result in zip(active, turns, results):
            _record_step(policy, d, t, turn, result, spec, text_only)
        if on_turn is not None:
            on_turn(t, len(active), sum(not d.done for d in dialogues))


def reply_seed(base: int, dialogue: int, turn: int) -> int:
    """The seed of dialogue `dialogue`'s reply at `turn` under continuous batching: its own, whatever
    else the batch holds, so a rerun with the same torch seed samples the same dialogues."""
    return (base + 1_000_003 * dialogue + turn) % 2**62


def _roll_continuously(
    policy: Any, dialogues: list[_Dialogue], engine: ContinuousEngine, spec: RolloutSpec,
    pool: ThreadPoolExecutor | None, timings: dict[str, float], on_turn: Callable[[int, int, int], None] | None,
) -> None:
    """Every dialogue's reply in the engine's running batch; as replies end, their environments step
    and the dialogues that go on submit their next reply. `on_turn(t, 1, 1 or 0)` per reply (whether
    its dialogue goes on), which counts as the waves' calls do."""
    base = int(torch.randint(0, 2**62, (1,)))
    turn_of: dict[int, int] = {}

    def requests(ready: list[int]) -> list[ReplyRequest]:
        asked = []
        for k in ready:
            d, t = dialogues[k], turn_of.get(k, 0) + 1
            if d.done or t > spec.max_turns or not _has_room(d, spec, t):
                continue
            turn_of[k] = t
            asked.append(ReplyRequest(k, _prompt_ids(d), spec.max_new_tokens, spec.temperature, spec.top_p,
                                      spec.max_sentences, reply_seed(base, k, t)))
        return asked

    try:
        engine.submit(requests(list(range(len(dialogues)))))
        while True:
            clock = time.perf_counter()
            replies = engine.finished()
            timings["generate"] += time.perf_counter() - clock
            if not replies:
                return
            ended = [(dialogues[k], k, turn_of[k], sample) for k, sample in replies]
            turns = [_record_reply(policy, d, t, sample, policy.decode(sample.ids), False) for d, _, t, sample in ended]
            clock = time.perf_counter()
            results = _map(pool, lambda pair: pair[0].env.step(pair[1].response), [(d, turn) for (d, *_), turn in zip(ended, turns)])
            timings["env"] += time.perf_counter() - clock
            for (d, _, t, _), turn, result in zip(ended, turns, results):
                _record_step(policy, d, t, turn, result, spec, False)
            engine.submit(requests([k for _, k, _, _ in ended]))
            if on_turn is not None:
                for d, _, t, _ in ended:
                    on_turn(t, 1, int(not d.done))
    finally:
        engine.cancel()  # an exception or an interrupt leaves no reply running
