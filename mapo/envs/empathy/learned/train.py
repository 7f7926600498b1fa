"""Training the learned judge on the labelled exemplars (`mapo env train-judge`).

Loss per batch (the replies of `contexts_per_batch` whole contexts): the mean cross-entropy of
the six heads against the labelled magnitudes, plus `rank_weight` times a pairwise logistic
loss on the expected projection E[v] . v*_0 (E[v] under the heads' probabilities): for every
pair of one context whose labelled projections differ, the better reply should score higher,
which is what `mapo env calibrate` ranks by.

The frozen bottom of the encoder is run once per reply and cached (`BottomCache`), so an epoch
costs only the trained top layers; leave-one-writer-out folds share one cache. One CPU thread
by default (the other cores train policies); deterministic for a seed on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mapo.envs.dynamics import LEVEL_KEYS, levels_to_vector
from mapo.envs.empathy.calibrate import Exemplar, load_exemplars
from mapo.envs.empathy.learned.model import CrossEncoderConfig, base_fingerprint, build, pair_text, save, tokenize, value_table

TRAIN_SPLITS = ("calibration", "heldout", "adversarial", "blind")
ENCODE_BATCH = 32


@dataclass
class TrainOptions:
    trained_layers: int = 1
    epochs: int = 4
    max_length: int = 256
    seed: int = 0
    lr_layers: float = 1e-4
    lr_heads: float = 2e-3
    rank_weight: float = 1.0
    contexts_per_batch: int = 2
    threads: int = 1


def writer_unit(e: Exemplar) -> str:
    """A blind reply's writer unit is its set (`blind3`..: one writer per set, per the files'
    headers); any other reply's unit is its split."""
    prefix = e.context_id.split("-", 1)[0]
    return prefix if e.split == "blind" and prefix.startswith("blind") else e.split


def training_exemplars(
    folder: str | Path | None = None, splits: Sequence[str] = TRAIN_SPLITS, exclude: Iterable[str] = ()
) -> list[Exemplar]:
    """The labelled replies of `splits` (sealed sets left out, as `load_exemplars` does), minus the writer units in `exclude`."""
    leave = set(exclude)
    return [e for e in load_exemplars("all", folder) if e.split in splits and writer_unit(e) not in leave]


@dataclass
class BottomCache:
    """Frozen-layer hidden states per (context text, reply) pair, filled on demand."""

    max_length: int
    states: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)  # pair -> (hidden, segment)

    def fill(self, tokenizer: Any, model: Any, pairs: Sequence[tuple[str, str]], show: bool = True) -> None:
        from mapo.progress import progress_bar

        missing = sorted(set(pairs) - set(self.states), key=lambda p: (len(p[0]) + len(p[1]), p))
        with progress_bar(len(missing), "encoding (frozen layers)", show=show and bool(missing)) as advance:
            for start in range(0, len(missing), ENCODE_BATCH):
                chunk = missing[start : start + ENCODE_BATCH]
                batch = tokenize(tokenizer, chunk, self.max_length)
                hidden = model.bottom(batch)
                for i, pair in enumerate(chunk):
                    n = int(batch["attention_mask"][i].sum())
                    self.states[pair] = (hidden[i, :n].clone(), batch["token_type_ids"][i, :n].clone())
                advance(len(chunk))

    def batch(self, pairs: Sequence[tuple[str, str]]) -> tuple[Any, Any, Any]:
        """(hidden, mask, segment) padded to the longest pair."""
        import torch

        rows = [self.states[p] for p in pairs]
        width = max(h.shape[0] for h, _ in rows)
        hidden = torch.zeros(len(rows), width, rows[0][0].shape[1])
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        segment = torch.zeros(len(rows), width, dtype=torch.long)
        for i, (h, s) in enumerate(rows):
            hidden[i, : h.shape[0]], mask[i, : h.shape[0]], segment[i, : h.shape[0]] = h, 1, s
        return hidden, mask, segment


def train(
    exemplars: Sequence[Exemplar],
    options: TrainOptions,
    base: Path | None = None,
    cache: BottomCache | None = None,
    show: bool = True,
) -> tuple[Any, Any, CrossEncoderConfig, dict[str, Any]]:
    """(tokenizer, model in eval mode, config, summary) trained on `exemplars`."""
    import torch

    from mapo.envs import embeddings
    from mapo.progress import progress_bar

    if not exemplars:
        raise ValueError("train-judge: no labelled replies to train on")
    base = base or embeddings.model_dir()
    torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    units: dict[str, int] = {}
    for e in exemplars:
        units[writer_unit(e)] = units.get(writer_unit(e), 0) + 1
    config = CrossEncoderConfig(
        trained_layers=options.trained_layers, max_length=options.max_length, base_fingerprint=base_fingerprint(base),
        seed=options.seed, epochs=options.epochs, rank_weight=options.rank_weight, trained_on=dict(sorted(units.items())),
    )
    tokenizer, model = build(base, config)
    cache = cache or BottomCache(options.max_length)
    if cache.max_length != options.max_length:
        raise ValueError(f"train-judge: the cache was built for max_length {cache.max_length}, not {options.max_length}")
    pairs = [pair_text(e.context, e.response) for e in exemplars]
    model.eval()
    cache.fill(tokenizer, model, pairs, show=show)

    magnitudes = torch.tensor([[abs(e.expected[k]) for k in LEVEL_KEYS] for e in exemplars])
    targets = torch.tensor(np.stack([e.target for e in exemplars]), dtype=torch.float32)
    projections = torch.tensor([float(np.dot(levels_to_vector(e.expected), e.target)) for e in exemplars])
    values = torch.tensor(value_table(), dtype=torch.float32)
    contexts: dict[str, list[int]] = {}
    for i, e in enumerate(exemplars):
        contexts.setdefault(e.context_id, []).append(i)
    context_ids = list(contexts)

    trained = [p for p in model.encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        [{"params": trained, "lr": options.lr_layers}, {"params": model.heads.parameters(), "lr": options.lr_heads}],
        weight_decay=0.01,
    )
    per_epoch = -(-len(context_ids) // options.contexts_per_batch)
    total = per_epoch * options.epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total))
    rng = np.random.default_rng(options.seed)
    model.train()
    started, losses = time.perf_counter(), []
    with progress_bar(total, "training the judge", status="loss {task.fields[loss]}", loss="-", show=show) as advance:
        for _ in range(options.epochs):
            order = rng.permutation(len(context_ids))
            for start in range(0, len(order), options.contexts_per_batch):
                idx = [i for c in order[start : start + options.contexts_per_batch] for i in contexts[context_ids[c]]]
                hidden, mask, segment = cache.batch([pairs[i] for i in idx])
                logits = model.top(hidden, mask, segment)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 3), magnitudes[idx].reshape(-1))
                if options.rank_weight:
                    loss = loss + options.rank_weight * _rank_loss(logits, values, targets[idx], projections[idx], idx, exemplars)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
                losses.append(loss.item())
                advance(1, loss=f"{np.mean(losses[-20:]):.3f}")
    model.eval()
    summary = {
        "replies": len(exemplars), "contexts": len(context_ids), "steps": total,
        "train_seconds": round(time.perf_counter() - started, 1), "final_loss": round(float(np.mean(losses[-20:])), 4),
    }
    return tokenizer, model, config, summary


def _rank_loss(logits: Any, values: Any, targets: Any, projections: Any, idx: list[int], exemplars: Sequence[Exemplar]) -> Any:
    """Mean logistic loss over the pairs of one context whose labelled projections differ."""
    import torch

    probs = logits.softmax(-1)  # (n, 6, 3)
    expected_v = torch.einsum("nkm,kma->na", probs, values)
    score = (expected_v * targets).sum(-1)
    same = torch.tensor([[exemplars[i].context_id == exemplars[j].context_id for j in idx] for i in idx])
    better = same & (projections[:, None] > projections[None, :])
    if not bool(better.any()):
        return logits.sum() * 0.0
    margin = score[:, None] - score[None, :]
    return torch.nn.functional.softplus(-margin[better]).mean()


def train_to_folder(out: Path, exemplars: Sequence[Exemplar], options: TrainOptions, show: bool = True) -> dict[str, Any]:
    """Train and write the judge folder (`judge.json`, `weights.pt`); the summary."""
    _, model, config, summary = train(exemplars, options, show=show)
    save(out, model, config)
    return summary
