"""verl training data for mapo dialogues: one parquet row per scenario.

verl's RLHFDataset reads `prompt` (chat messages: here only the policy's system
prompt; the simulated user speaks first at run time), `agent_name` (which agent
loop runs the row) and `extra_info` (handed to the loop: the scenario id and where
to find its card). Usage:

    python -m mapo.integrations.verl.data --out ~/data/mapo            # bundled train/test cards
    python -m mapo.integrations.verl.data --out DIR --train CARDS_DIR --test CARDS_DIR2
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mapo.integrations.verl.agent_loop import AGENT_NAME, scenario_table
from mapo.envs.empathy.env import LISTENER_PROMPT  # the same policy prompt as `mapo train`

DATA_SOURCE = "mapo/empathy"


def scenario_rows(
    source: str, system_prompt: str = LISTENER_PROMPT, data_source: str = DATA_SOURCE
) -> list[dict[str, Any]]:
    """One verl dataset row per scenario of `source` (a bundled split name or a folder of cards)."""
    if not system_prompt.strip():
        raise ValueError("system_prompt is empty; the policy needs to be told its role")
    scenarios = sorted(scenario_table(source).values(), key=lambda s: s.id)
    return [
        {
            "data_source": data_source,
            "agent_name": AGENT_NAME,
            "prompt": [{"role": "system", "content": system_prompt}],
            "reward_model": {"style": "mapo-environment", "ground_truth": ""},
            "extra_info": {"index": i, "scenario_id": s.id, "scenarios": source},
        }
        for i, s in enumerate(scenarios)
    ]


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pandas as pd

    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mapo.integrations.verl.data", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for train.parquet and test.parquet")
    parser.add_argument("--train", default="train", help="bundled split name or folder of cards (default: train)")
    parser.add_argument("--test", default="test", help="bundled split name or folder of cards (default: test)")
    parser.add_argument("--system-prompt-file", help="text file with the policy's system prompt")
    args = parser.parse_args(argv)
    system_prompt = (
        Path(args.system_prompt_file).read_text(encoding="utf-8") if args.system_prompt_file else LISTENER_PROMPT
    )
    out = Path(args.out).expanduser()
    for split, source in (("train", args.train), ("test", args.test)):
        source = source if source in ("train", "test", "all") else str(Path(source).expanduser().resolve())
        path = write_parquet(scenario_rows(source, system_prompt), out / f"{split}.parquet")
        print(f"{split}: {path}")


if __name__ == "__main__":
    main()
