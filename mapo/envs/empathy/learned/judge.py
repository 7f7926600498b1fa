"""The learned judge kind (`judge: learned`, option `path`: a folder from `mapo env train-judge`).

The six levels are the cross-encoder's most probable magnitude per level key (`decode: argmax`)
or its expected magnitude rounded (`decode: rounded`), or per axis the levels nearest the
expected v_t (`decode: nearest`; `model.py`). With
`degenerate_gate` (the default) a reply the offline judge's detectors call degenerate (word
salad, loop, role swap, ...) keeps the offline judge's levels instead: those detectors were
written and checked against the failure families, and a reward must never pay such text.
Evidence names the head's probability; `info` carries each key's probabilities and E[v].
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.learned.model import (
    WEIGHTS_FILE, CrossEncoderConfig, JudgeFolderError, DECODERS, levels_from_probabilities, load, pair_text, tokenize, value_table,
)
from mapo.envs.empathy.offline.features import JudgeContext
from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, Judgement

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

BATCH = 16
CACHE_SIZE = 4096
# One loaded model per folder per process: the environment makes a judge per trajectory.
_MODELS: dict[tuple[str, float], tuple[Any, Any, CrossEncoderConfig]] = {}
_MODELS_LOCK = threading.Lock()


def _loaded(folder: Path, base: Path) -> tuple[Any, Any, CrossEncoderConfig]:
    """`model.load`, once per folder (and per version of its weights file) in this process."""
    weights = folder / WEIGHTS_FILE
    key = (str(folder.resolve()), weights.stat().st_mtime if weights.is_file() else -1.0)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = load(folder, base)
        return _MODELS[key]


class LearnedJudge:
    """A fine-tuned cross-encoder over (context, reply); see the module docstring."""

    def __init__(self, path: str | Path | None = None, degenerate_gate: bool = True, decode: str = "argmax") -> None:
        from mapo.envs import embeddings

        if path is None or not str(path).strip():
            raise JudgeFolderError(
                "learned judge: needs the option path=DIR, a folder made by `mapo env train-judge --out DIR`"
            )
        if not isinstance(degenerate_gate, bool):
            raise ValueError(f"learned judge: degenerate_gate must be true or false, got {degenerate_gate!r}")
        if decode not in DECODERS:
            raise ValueError(f"learned judge: decode must be one of {', '.join(DECODERS)}, got {decode!r}")
        self.path, self.decode = Path(path), decode
        self.tokenizer, self.model, self.config = _loaded(self.path, embeddings.model_dir())
        self.gate = OfflineJudge() if degenerate_gate else None
        self._logits: dict[tuple[str, str], Any] = {}

    @classmethod
    def from_model(
        cls, tokenizer: Any, model: Any, config: CrossEncoderConfig, degenerate_gate: bool = True, decode: str = "argmax"
    ) -> LearnedJudge:
        """A judge over a model trained in this process (leave-one-writer-out folds), no folder."""
        judge = cls.__new__(cls)
        judge.path, judge.decode, judge.tokenizer, judge.model, judge.config = None, decode, tokenizer, model.eval(), config
        judge.gate = OfflineJudge() if degenerate_gate else None
        judge._logits = {}
        return judge

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        """Stateless: nothing to reset (the history carries the earlier turns)."""

    def judge(self, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> Judgement:
        return self.score(JudgeContext.before_reply(card, history, response, state), response)

    def prime(self, items: list[tuple[JudgeContext, str]]) -> None:
        """Score every pair in batches up front (calibration), and prime the gate's embeddings."""
        self._run([pair_text(c, r) for c, r in items if r.strip()])
        if self.gate is not None:
            self.gate.prime(items)

    def score(self, context: JudgeContext, response: str) -> Judgement:
        if not response.strip():
            return Judgement(levels={**NEUTRAL_LEVELS, "A_neg": -1}, evidence={"A_neg": "empty reply"})
        if self.gate is not None:
            rules = self.gate.score(context, response)
            degenerate = rules.info.get("features", {}).get("degenerate")
            if degenerate:
                return Judgement(levels=rules.levels, evidence=rules.evidence, info={**rules.info, "gated": sorted(degenerate)})
        pair = pair_text(context, response)
        self._run([pair])
        probs = self._logits[pair].softmax(-1)
        levels = levels_from_probabilities(probs.unsqueeze(0), self.decode)[0]
        evidence = {
            key: f"learned head: p={float(probs[k, abs(levels[key])]):.2f}" for k, key in enumerate(LEVEL_KEYS) if levels[key]
        }
        expected_v = np.einsum("km,kma->a", probs.numpy(), value_table())
        info = {
            "probabilities": {key: [round(float(x), 3) for x in probs[k]] for k, key in enumerate(LEVEL_KEYS)},
            "expected_v": [round(float(x), 3) for x in expected_v],
        }
        return Judgement(levels=levels, evidence=evidence, info=info)

    def _run(self, pairs: list[tuple[str, str]]) -> None:
        import torch

        missing = list(dict.fromkeys(p for p in pairs if p not in self._logits))
        with torch.no_grad():
            for start in range(0, len(missing), BATCH):
                chunk = missing[start : start + BATCH]
                batch = tokenize(self.tokenizer, chunk, self.config.max_length)
                hidden = self.model.bottom(batch)
                logits = self.model.top(hidden, batch["attention_mask"], batch["token_type_ids"])
                self._logits.update(zip(chunk, logits))
        while len(self._logits) > CACHE_SIZE:
            self._logits.pop(next(iter(self._logits)))

