"""Judge calibration: how well a judge reproduces the labelled exemplars.

The exemplars (`mapo/data/judge_exemplars/*.yaml`, format in the README there) are
contexts with several replies of graded quality and their expected six levels.
`evaluate(judge, exemplars)` reports

- per level key: the exact-match rate and the within-1 rate of the judge's level;
- pairwise ranking accuracy: for every two replies to the same context whose expected
  v . v*_0 differ, the judge's v . v*_0 must order them the same way (a tie counts as
  wrong), with v = levels_to_vector(levels) and v*_0 = -P_0 / ||P_0||.

Any judge kind can be evaluated (`mapo env calibrate --judge KIND --judge-option key=value`):
one with `score(context: JudgeContext, response) -> Judgement` (the offline and the LLM judge)
on every exemplar; one with only the role protocol (`reset`, `judge(card, history, response,
state)`) on the contexts of a bundled card, with that card and P_{t-1}, the self-contained
contexts counted as skipped. Replies are judged `concurrency` at a time (threads: an LLM judge
waits on its server); a judge that primes a local batch (the offline judge) is scored in order.
A judge's fallbacks (no valid judgement, the neutral levels used) are scored as they are and
counted, as are its repairs (`Judgement.info["repaired"]`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import yaml

from mapo.core.types import AXES
from mapo.envs.dynamics import LEVEL_KEYS, levels_to_vector, validate_levels
from mapo.envs.empathy.cards import ScenarioCard
from mapo.envs.empathy.offline.features import JudgeContext
from mapo.envs.empathy.roles import Judge, Judgement

Split = Literal["calibration", "heldout", "adversarial", "blind", "policy", "all"]
# calibration: tune on it; heldout: a regression guard (the bundled-card contexts and the
# former blind sets, `former_blind/`); adversarial: degenerate replies of the failure families
# below beside good replies to the same contexts; blind: written by someone who never saw the
# judge, before any tuning against it, and read once at the end (`blind/`, absent until then);
# policy: replies trained policies actually produced, labelled by a careful rater (development).
SPLITS = ("calibration", "heldout", "adversarial", "blind", "policy")
# Degenerate replies a reward-seeking policy drifts to; none may earn progress (v . v*_0 <= 0).
FAILURE_FAMILIES = (
    "word_salad", "loop", "role_swap", "off_topic", "invented", "fragment", "platitude", "keyword_stuffing",
)
CUE_KEYS = {"C": "understanding", "A": "validation", "P": "empowerment"}


class ExemplarError(ValueError):
    """An exemplar file that cannot be used; the message names the file and the context."""


@dataclass
class Exemplar:
    """One labelled reply to one context."""

    context_id: str
    split: str
    scenario_id: str | None
    kind: str
    context: JudgeContext
    p0: tuple[float, float, float]
    state: tuple[float, float, float]  # P_{t-1}, the need vector before this reply
    response: str
    expected: dict[str, int]
    history: list[dict[str, str]] = field(default_factory=list)
    family: str | None = None  # one of FAILURE_FAMILIES for a degenerate reply

    @property
    def target(self) -> np.ndarray:
        p0 = np.asarray(self.p0, dtype=float)
        return -p0 / np.linalg.norm(p0)


class ScoringJudge(Protocol):
    def score(self, context: JudgeContext, response: str) -> Judgement: ...


def exemplar_dir() -> Path:
    return Path(str(resources.files("mapo") / "data" / "judge_exemplars"))


def _vector3(value: Any, where: str, name: str) -> tuple[float, float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise ExemplarError(f"{where}: {name} must be a list of 3 numbers (C, A, P), got {value!r}")
    try:
        out = tuple(float(x) for x in value)
    except (TypeError, ValueError):
        raise ExemplarError(f"{where}: {name} must be numbers, got {value!r}") from None
    if any(x > 0 or x < -27 for x in out):
        raise ExemplarError(f"{where}: {name} components must lie in [-27, 0], got {value!r}")
    if name == "p0" and not any(out):
        raise ExemplarError(f"{where}: p0 must not be all zero (it gives the ranking direction)")
    return out  # type: ignore[return-value]


def _card_fields(scenario_id: str, where: str, cards: dict[str, Any]) -> dict[str, Any]:
    if scenario_id not in cards:
        raise ExemplarError(f"{where}: scenario_id {scenario_id!r} is not a bundled scenario card")
    card = cards[scenario_id].card
    return {
        "background": ScenarioCard.model_validate(card).background(),
        "situation": card["situation"],
        "cues": card["cues"],
        "p0": list(cards[scenario_id].initial_state or ()),
        "category": card["category"],
    }


def _parse_context(raw: Any, where: str, cards: dict[str, Any]) -> list[Exemplar]:
    if not isinstance(raw, dict):
        raise ExemplarError(f"{where}: each context must be a mapping, got {type(raw).__name__}")
    cid = raw.get("context_id")
    if not isinstance(cid, str) or not cid:
        raise ExemplarError(f"{where}: missing context_id")
    where = f"{where} context {cid}"
    if raw.get("split") not in SPLITS:
        raise ExemplarError(f"{where}: split must be one of {SPLITS}, got {raw.get('split')!r}")
    scenario_id = raw.get("scenario_id")
    merged = dict(raw)
    if scenario_id:
        merged = {**_card_fields(scenario_id, where, cards), **{k: v for k, v in raw.items() if v is not None}}
    for key in ("situation", "cues", "p0", "history", "responses"):
        if key not in merged:
            raise ExemplarError(f"{where}: missing {key}")
    cues = merged["cues"]
    if not isinstance(cues, dict) or any(not isinstance(cues.get(k), list) or not cues[k] for k in CUE_KEYS.values()):
        raise ExemplarError(f"{where}: cues must have non-empty lists understanding, validation, empowerment")
    p0 = _vector3(merged["p0"], where, "p0")
    state = _vector3(merged["state"], where, "state") if merged.get("state") is not None else p0
    history = merged["history"]
    if not isinstance(history, list) or not history or any(
        not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or not isinstance(m.get("content"), str)
        for m in history
    ):
        raise ExemplarError(f"{where}: history must be a non-empty list of {{role: user|assistant, content: text}}")
    if history[-1]["role"] != "user":
        raise ExemplarError(f"{where}: the last history message must be the user's")
    context = JudgeContext(
        situation=str(merged["situation"]),
        cues={axis: [str(c) for c in cues[key]] for axis, key in CUE_KEYS.items()},
        user_turns=[m["content"] for m in history if m["role"] == "user"],
        own_turns=[m["content"] for m in history if m["role"] == "assistant"],
        deepest_axis=AXES[int(np.argmin(state))],
        background=list(merged.get("background") or []),
        history=[dict(m) for m in history],
    )
    out = []
    for i, resp in enumerate(merged["responses"]):
        rwhere = f"{where} response {i + 1}"
        if not isinstance(resp, dict) or not isinstance(resp.get("text"), str) or not resp["text"].strip():
            raise ExemplarError(f"{rwhere}: needs a non-empty text")
        levels = {k: 0 for k in LEVEL_KEYS}
        given = resp.get("levels") or {}
        if not isinstance(given, dict):
            raise ExemplarError(f"{rwhere}: levels must be a mapping of level key to value")
        levels.update(given)
        try:
            expected = validate_levels(levels)
        except ValueError as exc:
            raise ExemplarError(f"{rwhere}: {exc}") from None
        family = resp.get("family")
        if family is not None and family not in FAILURE_FAMILIES:
            raise ExemplarError(f"{rwhere}: family must be one of {FAILURE_FAMILIES}, got {family!r}")
        if family is not None and _projection(expected, -np.asarray(p0) / np.linalg.norm(p0)) > 0:
            raise ExemplarError(f"{rwhere}: a {family} reply must be labelled with no progress (v . v*_0 <= 0)")
        out.append(
            Exemplar(
                context_id=cid,
                split=raw["split"],
                scenario_id=scenario_id or None,
                kind=str(resp.get("kind", "")),
                context=context,
                p0=p0,
                state=state,
                response=resp["text"].strip(),
                expected=expected,
                history=history,
                family=family,
            )
        )
    if len(out) < 2:
        raise ExemplarError(f"{where}: needs at least two responses to rank")
    return out


SEALED = "SEALED"  # a file marking a subfolder as a blind set not read yet


def load_exemplars(split: Split = "all", folder: str | Path | None = None) -> list[Exemplar]:
    """All exemplars under `folder` and its subfolders (default: the bundled set), filtered by split.

    A subfolder holding a `SEALED` file is a blind set kept for one planned reading: it is left
    out unless it is the folder asked for, so `--split blind` cannot read it by accident."""
    if split not in (*SPLITS, "all"):
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)} or 'all'")
    folder = Path(folder) if folder is not None else exemplar_dir()
    sealed = [marker.parent for marker in folder.glob(f"**/{SEALED}") if marker.parent != folder]
    files = sorted(f for f in folder.glob("**/*.yaml") if not any(f.is_relative_to(d) for d in sealed))
    if not files:
        raise ExemplarError(f"{folder}: no exemplar files (*.yaml)")
    from mapo.envs.empathy.cards import bundled_scenarios

    cards = {s.id: s for s in bundled_scenarios("all")}
    items: list[Exemplar] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ExemplarError(f"{path}: invalid YAML: {exc}") from None
        if not isinstance(raw, list):
            raise ExemplarError(f"{path}: expected a list of contexts")
        for ctx in raw:
            parsed = _parse_context(ctx, str(path), cards)
            cid = parsed[0].context_id
            if cid in seen:
                raise ExemplarError(f"{path}: context_id {cid!r} is also used in {seen[cid]}")
            seen[cid] = path
            items.extend(parsed)
    return [e for e in items if split == "all" or e.split == split]


def _projection(levels: dict[str, int], target: np.ndarray) -> float:
    return float(np.dot(levels_to_vector(levels), target))


def first_contexts(exemplars: Sequence[Exemplar], limit: int | None) -> list[Exemplar]:
    """The replies of the first `limit` contexts (all of them when `limit` is None): whole contexts, so pairs stay."""
    if limit is None:
        return list(exemplars)
    if limit < 1:
        raise ValueError(f"limit must be a positive number of contexts, got {limit}")
    kept = list(dict.fromkeys(e.context_id for e in exemplars))[:limit]
    return [e for e in exemplars if e.context_id in set(kept)]


def _role_scorer(judge: Judge) -> Callable[[Exemplar], Judgement]:
    """Score an exemplar through the role protocol: its bundled card, its history, P_{t-1} as the live state."""
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import bundled_scenarios

    cards = {s.id: ScenarioCard.model_validate(s.card) for s in bundled_scenarios("all")}

    def score(e: Exemplar) -> Judgement:
        state = NeedState(e.p0)
        state.p = np.asarray(e.state, dtype=float)
        judge.reset(cards[e.scenario_id], seed=0)
        return judge.judge(cards[e.scenario_id], list(e.history), e.response, state)

    return score


def judge_replies(judge: ScoringJudge | Judge, exemplars: Sequence[Exemplar], concurrency: int = 1) -> tuple[list[Exemplar], list[Judgement]]:
    """The exemplars `judge` can score and its judgement of each (see the module docstring)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if callable(getattr(judge, "score", None)):
        scorer: Callable[[Exemplar], Judgement] = lambda e: judge.score(e.context, e.response)  # noqa: E731
    elif callable(getattr(judge, "judge", None)) and callable(getattr(judge, "reset", None)):
        exemplars = [e for e in exemplars if e.scenario_id]
        scorer, concurrency = _role_scorer(judge), 1  # reset() is per episode: one reply at a time
    else:
        raise ValueError(
            f"{type(judge).__name__} can not be calibrated: it needs score(context, response) "
            "or the judge role protocol (reset and judge; see mapo.envs.empathy.roles)"
        )
    prime = getattr(judge, "prime", None)
    if callable(prime):  # e.g. the offline judge: one batched encoder pass instead of one per reply
        prime([(e.context, e.response) for e in exemplars])
        concurrency = 1
    if concurrency == 1:
        return list(exemplars), [scorer(e) for e in exemplars]
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="mapo-calibrate") as pool:
        return list(exemplars), list(pool.map(scorer, exemplars))


def evaluate(judge: ScoringJudge | Judge, exemplars: Sequence[Exemplar], concurrency: int = 1) -> dict[str, Any]:
    """Agreement and ranking metrics of `judge` on `exemplars` (see the module docstring)."""
    if not exemplars:
        raise ValueError("evaluate: no exemplars to score")
    given = len(exemplars)
    exemplars, predictions = judge_replies(judge, exemplars, concurrency)
    if not exemplars:
        raise ValueError(
            f"evaluate: {type(judge).__name__} has no score(context, response), so only contexts on a bundled "
            "card can be scored, and none of these is (use --split heldout, or give the judge a score method)"
        )
    per_level = {}
    for key in LEVEL_KEYS:
        diffs = [abs(p.levels[key] - e.expected[key]) for p, e in zip(predictions, exemplars)]
        per_level[key] = {
            "exact": sum(d == 0 for d in diffs) / len(diffs),
            "within1": sum(d <= 1 for d in diffs) / len(diffs),
        }
    by_context: dict[str, list[int]] = {}
    for i, e in enumerate(exemplars):
        by_context.setdefault(e.context_id, []).append(i)
    pairs = correct = fallback_pairs = 0
    errors = []
    for cid, idx in by_context.items():
        for i, j in itertools.combinations(idx, 2):
            target = exemplars[i].target
            exp_i, exp_j = _projection(exemplars[i].expected, target), _projection(exemplars[j].expected, target)
            if exp_i == exp_j:
                continue
            got_i, got_j = _projection(predictions[i].levels, target), _projection(predictions[j].levels, target)
            pairs += 1
            fallback_pairs += predictions[i].fallback or predictions[j].fallback
            if (exp_i - exp_j) * (got_i - got_j) > 0:
                correct += 1
            else:
                errors.append({"context_id": cid, "better": exemplars[i if exp_i > exp_j else j].kind,
                               "worse": exemplars[j if exp_i > exp_j else i].kind})
    items = [
        {
            "context_id": e.context_id,
            "split": e.split,
            "kind": e.kind,
            "family": e.family,
            "expected": e.expected,
            "judged": p.levels,
            "evidence": p.evidence,
            "exact": p.levels == e.expected,
            "fallback": p.fallback,
            "repaired": bool(p.info.get("repaired", False)),
            **({"reason": p.info["reason"]} if p.fallback and "reason" in p.info else {}),
        }
        for e, p in zip(exemplars, predictions)
    ]
    return {
        "items": len(exemplars),
        "contexts": len(by_context),
        "exact_all_six": sum(it["exact"] for it in items) / len(items),
        "per_level": per_level,
        "ranking": {
            "pairs": pairs,
            "correct": correct,
            "accuracy": correct / pairs if pairs else None,
            "with_fallback": fallback_pairs,  # pairs where either reply is a fallback (scored as its neutral levels)
        },
        "replies": {
            "judged": len(items),
            "skipped": given - len(items),  # self-contained contexts a role-protocol judge cannot see
            "repaired": sum(it["repaired"] for it in items),
            "fallbacks": sum(it["fallback"] for it in items),
        },
        "ranking_errors": errors,
        "families": _family_metrics(exemplars, predictions),
        "predictions": items,
    }


def _family_metrics(exemplars: Sequence[Exemplar], predictions: Sequence[Judgement]) -> dict[str, Any]:
    """Per failure family: how many replies the judge gives no progress (v . v*_0 <= 0) and a
    negative level, and how often a good reply to the same context is judged above them."""
    out: dict[str, Any] = {}
    for family in FAILURE_FAMILIES:
        idx = [i for i, e in enumerate(exemplars) if e.family == family]
        if not idx:
            continue
        got = [_projection(predictions[i].levels, exemplars[i].target) for i in idx]
        above = total = 0
        for i, proj in zip(idx, got):
            for j, e in enumerate(exemplars):
                if e.context_id == exemplars[i].context_id and e.family is None and _projection(e.expected, e.target) > 0:
                    total += 1
                    above += _projection(predictions[j].levels, e.target) > proj
        out[family] = {
            "replies": len(idx),
            "no_progress": sum(g <= 0 for g in got) / len(idx),
            "negative_level": sum(any(predictions[i].levels[k] < 0 for k in LEVEL_KEYS) for i in idx) / len(idx),
            "good_ranked_above": above / total if total else None,
        }
    return out
