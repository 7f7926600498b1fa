"""Labelled exemplars for the learned-head experiment, with the blind7 set never loaded.

`load()` parses the bundled exemplar files context by context and drops any context whose
context_id starts with "blind7-" (and any file whose path names set7/blind7) *before* it is
parsed into exemplars: nothing of that set is scored, featurised or looked at.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from mapo.envs.empathy.calibrate import Exemplar, _parse_context, exemplar_dir

FORBIDDEN = "blind7-"
HELD_OUT_PARTS = ("blind3", "blind4", "blind5", "blind6", "policy")


def part_of(context_id: str, split: str) -> str:
    for p in ("blind3", "blind4", "blind5", "blind6"):
        if context_id.startswith(p + "-"):
            return p
    return split  # calibration, heldout (bundled cards + former blind), adversarial, policy


def load() -> list[Exemplar]:
    from mapo.envs.empathy.cards import bundled_scenarios

    cards = {s.id: s for s in bundled_scenarios("all")}
    out: list[Exemplar] = []
    for path in sorted(Path(exemplar_dir()).glob("**/*.yaml")):
        low = str(path).lower()
        if "set7" in low or "blind7" in low:
            continue
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        for ctx in raw:
            cid = str(ctx.get("context_id", ""))
            if cid.startswith(FORBIDDEN):  # first thing: the blind7 set is never parsed
                continue
            out.extend(_parse_context(ctx, str(path), cards))
    assert not any(e.context_id.startswith(FORBIDDEN) for e in out)
    return out
