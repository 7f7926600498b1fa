"""What one llama.cpp decode step costs, by batch rows and by context length (docs/performance.md).

The engine's decode time is nearly all inside `llama_decode` (the bench's breakdown); this splits
that time into what grows with the rows decoded together (the weights' matmuls) and what grows with
the ids each row attends over (attention over its KV stream). It exports the policy as the engine
does (its base type), opens the engine's own `Decoder` with one KV stream per slot, prefills `rows`
slots with `context` ids each, and times `steps` decode steps of one id per slot. The grid is run
`--repeats` times over and each cell keeps its fastest time: on a shared machine the other jobs
only ever add time, so the minimum is the cell's own cost.

    PYTHONPATH=. python scripts/decode_cost.py --base-type BF16 --rows 1 8 16 --context 32 512 1024 --threads 1 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from mapo.config import load_config
from mapo.engines.gguf_export import write_model
from mapo.engines.llamacpp_decoder import Decoder
from mapo.policy import load_policy


def step_seconds(decoder: Decoder, rows: int, context: int, steps: int) -> float:
    """Mean seconds of one decode step of `rows` slots that each hold `context` ids."""
    decoder.clear()
    ids = [(7 * position) % 1000 + 100 for position in range(context + steps)]
    ignore = lambda logits, slots: None  # noqa: E731 (the logits are not read: only time counts)
    for slot in range(rows):
        decoder.forward([(slot, p, ids[p], p == context - 1) for p in range(context)], ignore)
    began = time.perf_counter()
    for step in range(steps):
        decoder.forward([(slot, context + step, ids[context + step], True) for slot in range(rows)], ignore)
    return (time.perf_counter() - began) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="policy.model (default: the embedded policy)")
    parser.add_argument("--base-type", default="BF16", help="the exported matrices' type: BF16, F16, Q8_0 ...")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--context", type=int, nargs="+", default=[32, 512, 1024])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the grid; each cell keeps its fastest")
    parser.add_argument("--output", type=Path, default=Path("runs/decode_cost.json"))
    args = parser.parse_args()

    policy = load_policy(load_config(None, [f"policy.model={args.model}"]).policy)
    fastest: dict[tuple[int, int], float] = {}
    with tempfile.TemporaryDirectory() as folder:
        gguf = write_model(policy.model.float(), policy.tokenizer, Path(folder) / "base.gguf", default_type=args.base_type)
        policy.tokenizer.save_pretrained(folder)
        slots, per_slot = max(args.rows), max(args.context) + args.steps + 8
        decoder = Decoder(str(gguf), slots, per_slot, args.threads, 512, str(Path(folder) / "tokenizer.json"))
        try:
            for _ in range(args.repeats):
                for context in args.context:
                    for rows in args.rows:
                        seconds = step_seconds(decoder, rows, context, args.steps)
                        fastest[rows, context] = min(seconds, fastest.get((rows, context), seconds))
        finally:
            decoder.close()
    rows_out = []
    for (rows, context), seconds in sorted(fastest.items(), key=lambda cell: (cell[0][1], cell[0][0])):
        rows_out.append({"rows": rows, "context": context, "ms_per_step": 1000 * seconds, "tokens_per_s": rows / seconds})
        print(f"{args.base_type} rows {rows:3d} context {context:5d}: {1000 * seconds:7.1f} ms a step, "
              f"{rows / seconds:6.1f} tokens/s")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.output.write_text(json.dumps({"settings": settings, "steps": rows_out}, indent=1) + "\n")
    print(f"Results: {args.output}")


if __name__ == "__main__":
    main()
