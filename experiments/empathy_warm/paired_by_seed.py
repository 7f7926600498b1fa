"""MAPO − GRPO by seed over the empathy-warm blind sets, with each set's GRPO / MAPO values (docs/results.md, thirteenth session): the
seeds' run folders are not all kept, but each blind set holds both evaluations' summaries. Usage:

    python experiments/empathy_warm/paired_by_seed.py docs/blind/empathy-warm-s*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mapo.intervals import t_interval
from mapo.validation import compressed_or_plain, text_of

FIGURES = {
    "EPM-Q": lambda s: s["epmq"]["epmq"],
    "passes (% of dialogues)": lambda s: 100.0 * s["pass_count"] / s["dialogues"],
    "distinct-2": lambda s: s["hacking"]["hack_distinct2"],
}


def summary(folder: Path, label: str) -> dict:
    return json.loads(text_of(compressed_or_plain(folder, f"eval-{label}.json")))["summary"]


if __name__ == "__main__":
    folders = [Path(arg) for arg in sys.argv[1:] if compressed_or_plain(Path(arg), "eval-mapo.json").is_file()]
    for name, figure in FIGURES.items():
        pairs = [(figure(summary(f, "grpo")), figure(summary(f, "mapo"))) for f in folders]
        print(f"{name}, GRPO / MAPO per set: " + ", ".join(f"{f.name} {g:.3f} / {m:.3f}" for f, (g, m) in zip(folders, pairs)))
        diffs = [m - g for g, m in pairs]
        t = t_interval(diffs)
        print(f"{name}: MAPO − GRPO {t['mean']:+.3f} [{t['low']:+.3f}, {t['high']:+.3f}] by seed over {t['n']} sets")
