"""`mapo eval`: run a policy on a scenario set and score it as the EMPA benchmark does.

The rollout is `mapo.core.rollout.rollout` (the trainer's own), with evaluation settings:
up to 45 turns, the environment's EMPA success and failure rules, the configured
temperature, `samples` dialogues per scenario. Scenarios go in batches of
`scenarios_per_batch` (x samples dialogues per generate call) with a progress bar.
Writes `eval.json` (config, aggregate with the reward-hacking monitor, per-scenario
results), `transcripts.jsonl` and `transcripts.html` (the viewer, with the need vector
per turn). An environment with a `dialogue_summary` adds its figures (`summary.figures`),
and one with `reference_players` gets them played on the same scenarios and settings
(`summary.references`: e.g. the questioning game's optimal, informative and random players),
written after the policy's own results so a failure there never loses the rollout.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mapo.core.rollout import RolloutSpec
from mapo.envs.base import (
    dialogue_summary,
    environment_factory,
    reference_players,
    reply_limits,
    evaluation_options,
    load_scenarios,
    transcript_keys_for,
    with_turn_cap,
)
from mapo.evaluate.bench import write_jsonl
from mapo.evaluate.empa import (
    aggregate,
    dialogue_metrics,
    hacking_line,
    per_scenario,
    transcript_record,
)
from mapo.evaluate.validity import fallback_verdict
from mapo.provenance import provenance


@dataclass
class EvalSpec:
    """Evaluation settings: EMPA's (45 turns, its success and failure rules) unless changed."""

    env: str = "empathy"  # a registered environment or "package.module:Factory" (mapo.envs.base)
    env_options: dict[str, Any] = field(default_factory=dict)
    scenarios: str = "test"  # what the environment's load_scenarios reads (a bundled split, a folder of cards, ...)
    limit: int | None = None  # only the first N scenarios
    samples: int = 1  # dialogues per scenario
    max_turns: int = 45
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 96
    max_sentences: int | None = 3
    max_context_tokens: int = 8192
    system_prompt: str | None = None  # None: the environment's own
    seed: int = 0
    scenarios_per_batch: int = 4  # scenarios rolled out together (x samples dialogues per generate call)
    env_workers: int = 8
    engine: str = "auto"  # what samples a local policy's replies: auto | hf | vllm (mapo.engines)
    # a summary with more turns than this scored on judge/director fallbacks is invalid (mapo.evaluate.validity)
    max_fallback_fraction: float = 0.5
    allow_fallbacks: bool = False  # keep an invalid summary (exit 0); it stays marked invalid

    def rollout_spec(self, scenarios: int) -> RolloutSpec:
        return RolloutSpec(
            scenarios_per_step=scenarios,
            samples_per_scenario=self.samples,
            max_turns=self.max_turns,
            max_new_tokens=self.max_new_tokens,
            max_sentences=self.max_sentences,
            max_context_tokens=self.max_context_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            system_prompt=self.system_prompt,
            env_workers=self.env_workers,
        )


def eval_spec_for(
    trained: Any | None,
    env: str | None,
    env_options: dict[str, Any],
    *,
    max_sentences: int | None,
    system_prompt: str | None,
    max_new_tokens: int | None = None,
    max_fallback_fraction: float | None = None,
    **settings: Any,
) -> EvalSpec:
    """`mapo eval`'s settings: what is given, else what the policy's training run used (`trained`,
    its TrainConfig, or None), else EvalSpec's defaults. `max_sentences=0` means no sentence limit;
    a run's environment options lose their training-only ending rules (`evaluation_options`).
    The reply limits (max_new_tokens, max_sentences) not given come from the training run,
    else from the environment's `reply_limits` (the questioning game: one short question),
    else EvalSpec's; max_new_tokens from a training run only for an environment with reply limits.
    The fallback threshold is the run's `env.max_fallback_fraction` unless given."""
    if not env_options and trained is not None and not env:
        env_options = evaluation_options(trained.env.name, trained.env.options)
    env_limits = reply_limits(env or (trained.env.name if trained else EvalSpec.env))
    if max_sentences is None:
        max_sentences = trained.rollout.max_sentences if trained else env_limits.get("max_sentences", EvalSpec.max_sentences)
    if max_new_tokens is None:
        from_run = trained.rollout.max_new_tokens if trained is not None and env_limits else None
        max_new_tokens = from_run or env_limits.get("max_new_tokens", EvalSpec.max_new_tokens)
    if system_prompt is None:
        system_prompt = trained.rollout.system_prompt if trained else EvalSpec.system_prompt
    if max_fallback_fraction is None:
        max_fallback_fraction = trained.env.max_fallback_fraction if trained else EvalSpec.max_fallback_fraction
    return EvalSpec(
        env=env or (trained.env.name if trained else EvalSpec.env),
        env_options=env_options,
        max_sentences=max_sentences or None,
        max_new_tokens=max_new_tokens,
        system_prompt=system_prompt,
        max_fallback_fraction=max_fallback_fraction,
        **settings,
    )


def env_options_for(spec: EvalSpec) -> dict[str, Any]:
    """The environment's options with its own timeout at the eval's turn cap (unless set explicitly)."""
    return with_turn_cap(spec.env, spec.env_options, spec.max_turns)


def run_eval(policy: Any, spec: EvalSpec, out_dir: str | Path, policy_label: str = "") -> Path:
    """Roll the policy out on every scenario (`spec.samples` each), score, and write
    `eval.json`, `transcripts.jsonl` and `transcripts.html` into `out_dir`, then play the
    environment's reference players and add them to eval.json; returns eval.json. A reference
    player that cannot play is noted (`summary.references_error`), the policy's results kept."""
    if spec.scenarios_per_batch < 1:
        raise ValueError(f"scenarios_per_batch must be >= 1, got {spec.scenarios_per_batch}")
    if spec.limit is not None and spec.limit < 1:
        raise ValueError(f"limit must be >= 1, got {spec.limit}")
    if not 0.0 <= spec.max_fallback_fraction <= 1.0:
        raise ValueError(f"max_fallback_fraction must be in [0, 1], got {spec.max_fallback_fraction}")
    env_options = env_options_for(spec)
    scenarios = load_scenarios(spec.env, spec.scenarios)[: spec.limit]
    started = time.time()
    dialogues, transcripts, engine_used = _play(policy, spec, env_options, scenarios, policy_label)
    seconds = round(time.time() - started, 1)
    summary = aggregate(dialogues, transcripts)
    summary["validity"] = fallback_verdict(summary, spec.max_fallback_fraction, spec.allow_fallbacks)
    figures = dialogue_summary(spec.env, transcripts)
    if figures is not None:
        summary["figures"] = figures
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {"policy": policy_label, **asdict(spec), "env_options": env_options,
              "engine_used": engine_used, "seconds": seconds}
    result = {"config": config, "summary": summary, "scenarios": per_scenario(dialogues), "provenance": provenance()}
    eval_path = out / "eval.json"
    # the policy's results first: whatever the reference players do next, the rollout is kept
    _write_json(eval_path, result)
    write_jsonl(out / "transcripts.jsonl", transcripts)
    _write_viewer(out, summary, transcripts, policy_label)
    players = [name for name in reference_players(spec.env) if name != policy_label]
    if players:
        try:
            summary["references"] = {name: _reference_summary(name, spec, env_options, scenarios) for name in players}
        except ValueError as err:  # e.g. a case the players cannot read: the policy's results stand
            summary["references_error"] = str(err)
        _write_json(eval_path, result)
    return eval_path


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_viewer(out: Path, summary: dict[str, Any], transcripts: list[dict[str, Any]], policy_label: str) -> None:
    """transcripts.html, headed by the policy's pass rate, EPM-Q, alignment and hacking monitor."""
    from mapo.report.html import render_transcripts

    headline = {
        "policy": policy_label,
        "pass": f"{summary['pass_count']} / {summary['dialogues']} ({100 * summary['pass_rate']:.1f}%)",
        "mean EPM-Q": summary["epmq"]["epmq"] if summary["epmq"] else None,
        "alignment to v*_0": summary["alignment"]["target"],
        "alignment to deficit": summary["alignment"]["deficit"],
        "fallbacks": summary["fallback_total"],
        "reward hacking": hacking_line(summary["hacking"]),
    }
    if not summary["validity"]["valid"]:  # the viewer shows the dialogues, not a score made of fallbacks
        headline = {"policy": policy_label, "INVALID": summary["validity"]["reason"],
                    "fallbacks": summary["fallback_total"], "reward hacking": hacking_line(summary["hacking"])}
    (out / "transcripts.html").write_text(
        render_transcripts(transcripts, f"mapo eval: {policy_label or out.name}", headline), encoding="utf-8"
    )


def _play(
    policy: Any, spec: EvalSpec, env_options: dict[str, Any], scenarios: list[Any], policy_label: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Every scenario's `spec.samples` dialogues: (per-dialogue metrics, transcript records, engine name)."""
    from concurrent.futures import ThreadPoolExecutor

    from mapo.core.rollout import rollout
    from mapo.engines.factory import make_engine
    from mapo.policy import Policy
    from mapo.progress import progress_bar
    from mapo.runtime import release_freed_memory, seed_everything, step_seed

    make_env = environment_factory(spec.env, env_options)
    extras = transcript_keys_for(spec.env)
    rollout_spec = spec.rollout_spec(min(spec.scenarios_per_batch, len(scenarios)))  # validates the settings
    by_id = {s.id: s for s in scenarios}
    dialogues: list[dict[str, Any]] = []
    transcripts: list[dict[str, Any]] = []
    batches = [scenarios[i : i + spec.scenarios_per_batch] for i in range(0, len(scenarios), spec.scenarios_per_batch)]
    engine = None
    if isinstance(policy, Policy):  # a local model samples through the rollout engine; an endpoint is its own
        engine = make_engine(spec.engine, policy, slots=rollout_spec.scenarios_per_step * spec.samples,
                             context_per_slot=spec.max_context_tokens)
        engine.sync(0)
    # Progress counts dialogue-turns; a dialogue that ends early jumps over its remaining turns.
    total = len(scenarios) * spec.samples * spec.max_turns
    description = " ".join(part for part in ("eval", policy_label, "(dialogue turns)") if part)
    with progress_bar(total, description) as advance, \
            ThreadPoolExecutor(max_workers=spec.env_workers) as pool, \
            contextlib.closing(engine) if engine is not None else contextlib.nullcontext():
        for k, batch in enumerate(batches):
            done = [0]

            def on_turn(t: int, sampled: int, going: int) -> None:
                step = sampled + (sampled - going) * (spec.max_turns - t)
                done[0] += step
                advance(step)

            seed_everything(step_seed(spec.seed, k))
            groups = rollout(policy, batch, make_env, rollout_spec, seed=step_seed(spec.seed, k, stream=2) % 2**31,
                             pool=pool, on_turn=on_turn, engine=engine)
            release_freed_memory()  # a batch's prompts and caches, freed but kept by the heap
            advance(len(batch) * spec.samples * spec.max_turns - done[0])  # dialogues cut before sampling
            for group in groups:
                for trajectory in group.trajectories:
                    metrics = dialogue_metrics(trajectory, by_id[trajectory.scenario_id])
                    dialogues.append(metrics)
                    transcripts.append(transcript_record(trajectory, metrics, extras))
    return dialogues, transcripts, engine.name if engine is not None else "endpoint"


def _reference_summary(name: str, spec: EvalSpec, env_options: dict[str, Any], scenarios: list[Any]) -> dict[str, Any]:
    """A reference player's pass rate and the environment's figures on the same scenarios and settings."""
    from mapo.evaluate.checkpoints import load_eval_policy

    player, label = load_eval_policy(name, seed=spec.seed)
    dialogues, transcripts, _ = _play(player, spec, env_options, scenarios, label)
    passes = sum(d["outcome"] == "success" for d in dialogues)
    return {"dialogues": len(dialogues), "pass_rate": passes / len(dialogues),
            "figures": dialogue_summary(spec.env, transcripts)}


def figures_line(figures: dict[str, Any]) -> str:
    """An environment's figures as one line: rates in percent, other numbers to three decimals."""
    def show(key: str, value: Any) -> str:
        if value is None:
            return "n/a"
        return f"{100 * value:.1f}%" if key.endswith("_rate") else f"{value:.3f}"

    return "  ".join(f"{key.replace('_', ' ')} {show(key, value)}" for key, value in figures.items())
