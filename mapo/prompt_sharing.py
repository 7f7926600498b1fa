"""One forward over a batch whose rows share their prompts, each distinct prompt computed once.

In the state view every reply is trained as its own sequence: the system prompt, the state it was
chosen in, the reply. The system prompt opens every row, and replies chosen in the same state (the
first reply of every game of a secret, say) repeat their whole context, so a plain padded forward
spends most of its work on copies. Here a row's prompt is everything before its last prompt token
(the one whose logits predict the first trained token), and the batch runs as three forwards
chained through the KV cache:

1. the prefix every prompt shares, once;
2. each distinct rest of a prompt, once, after the prefix;
3. each row's tail (its last prompt token and everything after it), after its own prompt.

The logits of 3 are the plain forward's at the same positions (the same sums in another order:
equal to float rounding), and the gradient reaches 1 and 2 through the cache. Only models whose
every layer attends to the whole context take this path (`supports_sharing`): a sliding-window
layer's cache would drop keys the plain forward sees.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import torch
from transformers import DynamicCache

MIN_SAVING = 0.1  # share of the plain forward's tokens below which the three passes are not worth it


@dataclasses.dataclass(frozen=True)
class SharedLayout:
    """Where each row of a batch goes in the three forwards (module docstring)."""

    prefix: list[int]  # the tokens every row's prompt starts with
    rests: list[list[int]]  # the distinct rests of the prompts after the prefix, in first-seen order
    rest_of_row: list[int]  # the index in `rests` of each row's
    tails: list[list[int]]  # each row's ids from its last prompt token on

    def fed_tokens(self) -> int:
        """Padded tokens the three forwards feed the model."""
        widest_rest = max(map(len, self.rests))
        return len(self.prefix) + len(self.rests) * widest_rest + len(self.tails) * max(map(len, self.tails))

    def split(self, row: int) -> int:
        """The position in `row`'s sequence where its tail starts."""
        return len(self.prefix) + len(self.rests[self.rest_of_row[row]])


def shared_layout(rows: Sequence[Sequence[int]], first_targets: Sequence[int]) -> SharedLayout:
    """The layout of `rows` (token ids, no padding) whose first trained position is `first_targets`
    (each >= 1): a row's prompt is its ids before first_target - 1."""
    prompts = [list(ids[: first - 1]) for ids, first in zip(rows, first_targets)]
    prefix = os.path.commonprefix(prompts) if prompts else []
    index: dict[tuple[int, ...], int] = {}
    rest_of_row = [index.setdefault(tuple(p[len(prefix):]), len(index)) for p in prompts]
    rests = [list(rest) for rest in index]
    tails = [list(ids[first - 1:]) for ids, first in zip(rows, first_targets)]
    return SharedLayout(list(prefix), rests, rest_of_row, tails)


def supports_sharing(model: torch.nn.Module) -> bool:
    """Whether every attention layer of `model` sees its whole context (no sliding window in use)."""
    config = model.config.get_text_config(decoder=True)
    layer_types = getattr(config, "layer_types", None) or []
    sliding = any("sliding" in str(kind) for kind in layer_types)
    return not (sliding or (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)))


def layout_if_worth(rows: Sequence[Sequence[int]], first_targets: Sequence[int | None]) -> SharedLayout | None:
    """`rows`' layout when the three forwards feed at least MIN_SAVING fewer tokens than a plain padded
    forward, else None (also for one row, or a row with nothing trained: first_target None)."""
    if len(rows) < 2 or any(first is None for first in first_targets):
        return None
    layout = shared_layout(rows, first_targets)
    plain = len(rows) * max(map(len, rows))
    return layout if layout.prefix and layout.fed_tokens() <= (1 - MIN_SAVING) * plain else None


def fed_tokens(rows: Sequence[Sequence[int]], first_targets: Sequence[int | None], share: bool) -> int:
    """Padded tokens the log-probs of `rows` feed the model: the three forwards' where they pay (and
    `share`), else the plain forward's."""
    layout = layout_if_worth(rows, first_targets) if share else None
    return layout.fed_tokens() if layout is not None else len(rows) * max(map(len, rows))


def _padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[r, : len(row)] = 1
    return ids, mask


def _cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    return DynamicCache(ddp_cache_data=[(k, v) for k, v in layers])


def _layers(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def shared_logits(
    model: torch.nn.Module, layout: SharedLayout, positions: torch.Tensor, pad_id: int, device: torch.device
) -> torch.Tensor:
    """[rows, len(positions), vocab] logits: for each row, those predicting the tokens at `positions`
    of its sequence (positions it does not have get its first tail logits: finite, for a caller that
    masks them)."""
    prefix = torch.tensor([layout.prefix], dtype=torch.long, device=device)
    first = model(input_ids=prefix, use_cache=True, logits_to_keep=1)
    kv = _layers(first.past_key_values)
    n_rests, n_prefix = len(layout.rests), len(layout.prefix)
    rest_ids, rest_mask = _padded([r or [pad_id] for r in layout.rests], pad_id)
    rest_mask[[i for i, r in enumerate(layout.rests) if not r]] = 0  # an empty rest: one masked pad
    rest_ids, rest_mask = rest_ids.to(device), rest_mask.to(device)
    width = rest_ids.shape[1]
    second = model(
        input_ids=rest_ids,
        attention_mask=torch.cat([torch.ones(n_rests, n_prefix, dtype=torch.long, device=device), rest_mask], 1),
        position_ids=(n_prefix + torch.arange(width, device=device)).expand(n_rests, -1),
        past_key_values=_cache([(k.expand(n_rests, -1, -1, -1), v.expand(n_rests, -1, -1, -1)) for k, v in kv]),
        use_cache=True,
        logits_to_keep=1,  # the rests' own logits predict nothing trained
    )
    of_row = torch.tensor(layout.rest_of_row, dtype=torch.long, device=device)
    tail_ids, tail_mask = (t.to(device) for t in _padded(layout.tails, pad_id))
    rows, tail_width = tail_ids.shape
    splits = torch.tensor([layout.split(r) for r in range(rows)], dtype=torch.long, device=device)
    # the tail index of the logits predicting position p is p - 1 - split; positions a row lacks read index 0
    wanted = positions.to(device).unsqueeze(0) - 1 - splits.unsqueeze(1)
    wanted = torch.where((wanted >= 0) & (wanted < tail_mask.sum(1, keepdim=True)), wanted, 0)
    columns = torch.unique(wanted)
    third = model(
        input_ids=tail_ids,
        attention_mask=torch.cat(
            [torch.ones(rows, n_prefix, dtype=torch.long, device=device), rest_mask[of_row], tail_mask], 1),
        position_ids=splits.unsqueeze(1) + torch.arange(tail_width, device=device),
        past_key_values=_cache([(k[of_row], v[of_row]) for k, v in _layers(second.past_key_values)]),
        use_cache=False,
        logits_to_keep=columns,
    ).logits
    at = torch.searchsorted(columns, wanted)  # each wanted tail index's place among the kept columns
    return third.gather(1, at.unsqueeze(-1).expand(-1, -1, third.shape[-1]))
