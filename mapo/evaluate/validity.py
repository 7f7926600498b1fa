"""Whether an evaluation's score can be trusted: the fallback rule of training, applied to `mapo eval`.

A turn on which the judge or the director could not give a valid reply is scored with the
role's neutral value (a fallback). A summary is invalid when the share of its turns with any
fallback exceeds `max_fraction` (`env.max_fallback_fraction`, 0.5 by default; the trainer stops
a step on the same rule, `mapo.reliability`): its EPM-Q and pass rate are then made of neutral
levels, not of judgements. The verdict goes into eval.json's summary (`validity`); the console
and `mapo compare` show such a summary's scores as invalid, with the share per role.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mapo.reliability import ROLES

DEFAULT_MAX_FRACTION = 0.5
JSON_FORMAT_ADVICE = (
    "json_format: llama_cpp for llama-cpp-python's server; json_schema for vLLM, SGLang, OpenAI or "
    "llama.cpp's llama-server; json_object for any server that can force a JSON object"
)


def _share(count: int, turns: int) -> float:
    return count / turns if turns else 0.0


def fallback_verdict(summary: Mapping[str, Any], max_fraction: float = DEFAULT_MAX_FRACTION,
                     allowed: bool = False) -> dict[str, Any]:
    """The verdict on one `mapo.evaluate.empa.aggregate` summary (JSON-ready).

    `shares`: per role, the share of all turns on which it fell back, and under "any" the share of
    turns with any fallback (the quantity the rule judges). `allowed`: the user kept the summary
    anyway (`--allow-fallbacks`); it stays marked invalid. A summary written before eval counted
    turns with any fallback (no `fallback_turns`) gets the largest role share as "any", a lower
    bound, and `approximate: true`.
    """
    if not 0.0 <= max_fraction <= 1.0:
        raise ValueError(f"max_fallback_fraction must be in [0, 1], got {max_fraction!r}")
    counts = {role: 0 for role in ROLES} | {str(k): int(v) for k, v in (summary.get("fallbacks") or {}).items()}
    approximate = "fallback_turns" not in summary or "turns_total" not in summary
    turns = int(summary["turns_total"]) if "turns_total" in summary else round(summary["turns_mean"] * summary["dialogues"])
    shares = {role: _share(count, turns) for role, count in counts.items()}
    shares["any"] = max(shares.values(), default=0.0) if approximate else _share(int(summary["fallback_turns"]), turns)
    valid = shares["any"] <= max_fraction
    reason = None
    if not valid:
        per_role = ", ".join(f"{role} {counts[role]} of {turns} turns ({shares[role]:.0%})" for role in counts)
        reason = (f"{shares['any']:.0%} of the turns were scored with fallback values ({per_role}), over "
                  f"env.max_fallback_fraction={max_fraction:g}: the scores are made of neutral levels, not judgements")
    return {"valid": valid, "reason": reason, "max_fallback_fraction": max_fraction, "turns": turns,
            "fallbacks": counts, "shares": shares, "approximate": approximate, "allowed": allowed}


def verdict_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict stored in an eval summary, or one computed at the default threshold for an
    eval.json written before evaluation judged its fallbacks."""
    stored = summary.get("validity")
    return dict(stored) if isinstance(stored, Mapping) else fallback_verdict(summary)


def role_options(env_options: Mapping[str, Any], role: str) -> Mapping[str, Any] | None:
    """An LLM role's options in an empathy-style option mapping (`roles: {judge: {kind: llm, ...}}`
    or `judge: llm` with `judge_options`); None when the role is not an LLM one."""
    spec = (env_options.get("roles") or {}).get(role) if isinstance(env_options.get("roles"), Mapping) else None
    if isinstance(spec, Mapping):
        return spec if spec.get("kind") == "llm" else None
    if env_options.get(role) == "llm":
        options = env_options.get(f"{role}_options")
        return options if isinstance(options, Mapping) else {}
    return None


def json_format_hint(env_options: Mapping[str, Any], verdict: Mapping[str, Any]) -> str | None:
    """What to try when LLM roles fell back: constrained decoding (`json_format`) for the roles that
    fell back without it, or, where it is already on, a look at the server and model."""
    without, already = [], []
    for role in ROLES:
        options = role_options(env_options, role)
        if options is None or not verdict["fallbacks"].get(role):
            continue
        if options.get("json_format"):
            already.append(f"the {role} already uses json_format={options['json_format']} and still fell back: "
                           "check its server's log and whether the model can follow the prompt")
        else:
            without.append(role)
    hints = []
    if without:
        keys = " and ".join(f"roles.{role}.json_format" for role in without)
        hints.append(f"the {' and '.join(without)} asked for JSON without constrained decoding: if the server "
                     f"supports it, set {keys} ({JSON_FORMAT_ADVICE})")
    return "; ".join(hints + already) or None
