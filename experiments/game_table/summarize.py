"""The part of a game evaluation worth committing: its settings, the policy's figures and the
three reference players' on the same games (eval.json without the per-scenario rows).

    python experiments/game_table/summarize.py runs/game-table-warm/eval experiments/game_table/warm_start_eval.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEPT_CONFIG = ("policy", "env", "env_options", "scenarios", "samples", "max_turns", "max_new_tokens", "temperature", "seed")


def summarize(eval_dir: Path) -> dict:
    data = json.loads((eval_dir / "eval.json").read_text(encoding="utf-8"))
    summary = data["summary"]
    return {
        "config": {key: data["config"].get(key) for key in KEPT_CONFIG},
        "dialogues": summary["dialogues"],
        "policy": summary["figures"],
        "references": {name: r["figures"] for name, r in summary.get("references", {}).items()},
        "provenance": data.get("provenance"),
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: summarize.py EVAL_DIR OUT.json")
    Path(sys.argv[2]).write_text(json.dumps(summarize(Path(sys.argv[1])), indent=2) + "\n", encoding="utf-8")
    print(f"Summary: {sys.argv[2]}")
