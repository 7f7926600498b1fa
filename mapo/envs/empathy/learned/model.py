"""The learned judge's cross-encoder: the shipped MiniLM reading (context, reply) as one
sequence pair, its top layers fine-tuned, six 3-way heads for the rubric's levels.

The bottom `len(layers) - trained_layers` layers and the embeddings stay as shipped (frozen),
so a trained judge folder holds only the top layers and the heads (`weights.pt`) beside
`judge.json`; the base model is found as the offline judge finds it (`embeddings.model_dir`)
and checked against the fingerprint recorded at training time.

Pooling: the mean of every token's last hidden state beside the mean over the reply's tokens
(the pair's second segment), so the heads see the reply as read in its context. Each head
scores the magnitude 0/1/2 of one level key (a negative key's level is minus that).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapo.core.types import AXES
from mapo.envs.dynamics import LEVEL_KEYS, NEG_KEYS, levels_to_vector
from mapo.envs.empathy.offline.features import JudgeContext

if TYPE_CHECKING:
    import torch

CONFIG_FILE = "judge.json"
WEIGHTS_FILE = "weights.pt"
FORMAT = "mapo-learned-judge/1"
NEED_WORDS = {"C": "being understood", "A": "having their feelings met", "P": "regaining agency"}


class JudgeFolderError(ValueError):
    """A learned-judge folder that is missing, incomplete or does not fit the installed base model."""


@dataclass
class CrossEncoderConfig:
    """What a trained folder needs to rebuild its model (and what it was trained on, for the record)."""

    trained_layers: int = 1
    max_length: int = 256
    base_fingerprint: str = ""  # sha256 of the base model's config + weights file names and sizes
    seed: int = 0
    epochs: int = 4
    rank_weight: float = 1.0
    trained_on: dict[str, int] | None = None  # replies per unit (split or blind set) used in training


def pair_text(context: JudgeContext, response: str) -> tuple[str, str]:
    """(first segment, reply): what they just said first, so truncation cuts the situation's tail,
    then our previous reply (a repeat is A_neg), the deepest need (advice then misses), the situation."""
    parts = [f"They say: {context.user_turns[-1] if context.user_turns else ''}"]
    if context.own_turns:
        parts.append(f"Earlier reply: {context.own_turns[-1]}")
    parts.append(f"Deepest need: {NEED_WORDS.get(context.deepest_axis, context.deepest_axis)}.")
    parts.append(f"Situation: {context.situation}")
    return " ".join(parts), response


def base_fingerprint(folder: Path) -> str:
    """A cheap identity of the base model: its config and the names and sizes of its weight files."""
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    for path in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        digest.update(f"{path.name}:{path.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def build(base: Path, config: CrossEncoderConfig) -> tuple[Any, Any]:
    """(tokenizer, CrossEncoder) from the base model folder, bottom layers frozen."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    encoder = AutoModel.from_pretrained(str(base), local_files_only=True)
    n_layers = encoder.config.num_hidden_layers
    if not 1 <= config.trained_layers <= n_layers:
        raise ValueError(f"trained_layers must be between 1 and {n_layers}, got {config.trained_layers}")

    class CrossEncoder(torch.nn.Module):
        """Frozen bottom (`bottom`) -> trainable top layers -> pooled -> six 3-way heads."""

        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.split = n_layers - config.trained_layers
            hidden = encoder.config.hidden_size
            self.heads = torch.nn.Linear(2 * hidden, 3 * len(LEVEL_KEYS))
            for p in self.encoder.parameters():
                p.requires_grad_(False)
            for layer in self.encoder.encoder.layer[self.split :]:
                for p in layer.parameters():
                    p.requires_grad_(True)

        def bottom(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            """Hidden states after the frozen layers (no gradient): what training caches."""
            with torch.no_grad():
                out = self.encoder(**batch, output_hidden_states=True)
            return out.hidden_states[self.split]

        def top(self, hidden: torch.Tensor, mask: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
            """Logits (batch, 6, 3) from the frozen layers' output."""
            additive = (1.0 - mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
            for layer in self.encoder.encoder.layer[self.split :]:
                out = layer(hidden, attention_mask=additive)
                hidden = out[0] if isinstance(out, tuple) else out
            m = mask.unsqueeze(-1).to(hidden.dtype)
            r = (mask * segment).unsqueeze(-1).to(hidden.dtype)
            pooled = torch.cat(
                [(hidden * m).sum(1) / m.sum(1).clamp(min=1.0), (hidden * r).sum(1) / r.sum(1).clamp(min=1.0)], dim=-1
            )
            return self.heads(pooled).view(-1, len(LEVEL_KEYS), 3)

        def trainable_state(self) -> dict[str, torch.Tensor]:
            """What a judge folder stores: the top layers and the heads."""
            keep = tuple(f"encoder.encoder.layer.{i}." for i in range(self.split, n_layers)) + ("heads.",)
            return {k: v.detach().clone() for k, v in self.state_dict().items() if k.startswith(keep)}

    return tokenizer, CrossEncoder()


def tokenize(tokenizer: Any, pairs: list[tuple[str, str]], max_length: int) -> dict[str, Any]:
    return tokenizer(
        [a for a, _ in pairs], [b for _, b in pairs],
        truncation="longest_first", max_length=max_length, padding=True, return_tensors="pt",
    )


DECODERS = ("argmax", "rounded", "nearest")


@functools.lru_cache(maxsize=1)
def value_table() -> Any:
    """(6 level keys, 3 magnitudes, 3 axes): the v_t contribution of each key at each magnitude."""
    import numpy as np

    table = np.zeros((len(LEVEL_KEYS), 3, len(AXES)))
    for k, key in enumerate(LEVEL_KEYS):
        for m in range(3):
            table[k, m] = levels_to_vector({**{x: 0 for x in LEVEL_KEYS}, key: -m if key in NEG_KEYS else m})
    return table


def levels_from_probabilities(probs: Any, decode: str = "argmax") -> list[dict[str, int]]:
    """The judge's integer levels from the heads' probabilities (n, 6, 3), signed:

    - `argmax`: per level key, the most probable magnitude;
    - `rounded`: per level key, the expected magnitude rounded;
    - `nearest`: per axis, the (progress, negative) pair whose v_t component is nearest the
      expected one under the probabilities (the more probable pair on a tie), so the integer
      levels keep as much of the heads' ordering as v_t's values allow."""
    import torch

    if decode == "argmax":
        magnitudes = probs.argmax(-1).tolist()
    elif decode == "rounded":
        magnitudes = torch.round((probs * torch.arange(3, dtype=probs.dtype)).sum(-1)).long().tolist()
    elif decode == "nearest":
        magnitudes = [_nearest(row) for row in probs.tolist()]
    else:
        raise ValueError(f"learned judge: decode must be one of {', '.join(DECODERS)}, got {decode!r}")
    return [{key: -m if key in NEG_KEYS else m for key, m in zip(LEVEL_KEYS, row)} for row in magnitudes]


def _nearest(probs: list[list[float]]) -> list[int]:
    """One reply's magnitudes by the `nearest` rule (keys in LEVEL_KEYS order)."""
    table = value_table()
    out = [0] * len(LEVEL_KEYS)
    for a, axis in enumerate(AXES):
        kp, kn = LEVEL_KEYS.index(f"{axis}_prog"), LEVEL_KEYS.index(f"{axis}_neg")
        expected = sum(probs[kp][m] * table[kp, m, a] + probs[kn][m] * table[kn, m, a] for m in range(3))
        best = min(
            ((mp, mn) for mp in range(3) for mn in range(3)),
            key=lambda c: (round(abs(table[kp, c[0], a] + table[kn, c[1], a] - expected), 9), -probs[kp][c[0]] * probs[kn][c[1]]),
        )
        out[kp], out[kn] = best
    return out


def save(folder: Path, model: Any, config: CrossEncoderConfig) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    # half precision: one trained layer and the heads stay under 4 MB; loading casts back to float32
    torch.save({k: v.half() for k, v in model.trainable_state().items()}, folder / WEIGHTS_FILE)
    (folder / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, **asdict(config)}, indent=2) + "\n", encoding="utf-8")


def load(folder: str | Path, base: Path) -> tuple[Any, Any, CrossEncoderConfig]:
    """(tokenizer, model in eval mode, config) of a trained judge folder; JudgeFolderError naming it."""
    import torch

    folder = Path(folder)
    hint = "train one with `mapo env train-judge --out DIR` (docs/judge.md)"
    if not folder.is_dir():
        raise JudgeFolderError(f"learned judge: {folder} is not a folder; {hint}")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise JudgeFolderError(f"learned judge: {folder} has no {name}; {hint}")
    try:
        raw = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise JudgeFolderError(f"learned judge: {folder / CONFIG_FILE} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.pop("format", None) != FORMAT:
        raise JudgeFolderError(f"learned judge: {folder / CONFIG_FILE} is not a {FORMAT} file")
    try:
        config = CrossEncoderConfig(**raw)
    except TypeError as exc:
        raise JudgeFolderError(f"learned judge: {folder / CONFIG_FILE}: {exc}") from None
    if config.base_fingerprint != base_fingerprint(base):
        raise JudgeFolderError(
            f"learned judge: {folder} was trained on another base model than the one at {base}; train it again"
        )
    tokenizer, model = build(base, config)
    try:
        state = torch.load(folder / WEIGHTS_FILE, map_location="cpu", weights_only=True)
        missing, unexpected = model.load_state_dict(state, strict=False)
    except Exception as exc:  # a truncated or foreign file: torch raises many kinds
        raise JudgeFolderError(f"learned judge: {folder / WEIGHTS_FILE} cannot be read: {exc}") from None
    expected = set(model.trainable_state())
    if unexpected or expected - set(state):
        raise JudgeFolderError(
            f"learned judge: {folder / WEIGHTS_FILE} does not match {CONFIG_FILE} "
            f"(missing {sorted(expected - set(state))[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    return tokenizer, model.eval(), config
