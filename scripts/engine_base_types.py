"""Which base model should the llama.cpp engine run? Decode speed and mismatch to torch per type.

For each base (the shipped GGUF and the torch weights written as F32, F16, BF16, Q8_0, Q4_0):
tokens/s of 16 sequences decoding together from 150-id prompts, and the behaviour-vs-torch
statistics (mean |log b - log pi_old|, KL, max importance ratio) on 8 replies sampled to
real scenario openings, against the torch policy in each of `--dtypes` (float32, and
bf16-mixed: the autocast path training takes on a CPU with native bfloat16). All bases in
one process, one after another.

    PYTHONPATH=. python scripts/engine_base_types.py [--threads 2] [--types F16 BF16] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from mapo.device import resolve_precision
from mapo.engines.gguf_export import write_model
from mapo.engines.importance import mismatch_stats
from mapo.engines.llamacpp import LlamaCppEngine
from mapo.engines.llamacpp_spec import LlamaCppSpec
from mapo.engines.llamacpp_decoder import Decoder
from mapo.engines.llamacpp_worker import sample
from mapo.envs.empathy.env import LISTENER_PROMPT
from mapo.gguf_cache import gguf_tokenizer_folder
from mapo.model_source import PolicySpec, embedded_gguf_path
from mapo.policy import load_policy

OPENINGS = [
    "My sister stopped talking to me after the wedding and I don't know why.",
    "I got laid off yesterday and I haven't told my wife yet.",
    "Everyone at the new school already has friends. I eat lunch alone.",
    "My dad was diagnosed with dementia and I live four hours away.",
]


def decode_speed(path: str, tokenizer: str, threads: int, repeats: int = 2) -> dict[str, float]:
    decoder = Decoder(path, 16, 512, threads, 512, tokenizer)
    decoder.version = 0
    totals = np.zeros(4)
    try:
        for rep in range(repeats):
            contexts = [[1] + list(range(100 + j + rep, 250 + j)) for j in range(16)]
            reply = sample(decoder, {"contexts": contexts, "version": 0, "max_new_tokens": 24, "temperature": 0.7,
                                    "top_p": 1.0, "max_sentences": None, "end_of_turn_id": 2, "seed": rep,
                                    "threads": threads})
            stats = reply["stats"]
            totals += [stats["prefill_tokens"], stats["prefill_s"], stats["decode_rows"], stats["decode_s"]]
            decoder.clear()
    finally:
        decoder.close()
    return {"prefill_tokens_per_s": totals[0] / totals[1], "decode_tokens_per_s": totals[2] / totals[3]}


def mismatch(policy, path: Path, threads: int, dtypes: list[str]) -> dict[str, float]:
    contexts = [policy.first_prompt_ids(LISTENER_PROMPT, o) for o in OPENINGS for _ in range(2)]
    with LlamaCppEngine(policy, 8, 1024, LlamaCppSpec(threads=threads, base_type="source"), source_gguf=path) as engine:
        engine.sync(0)
        torch.manual_seed(0)
        samples = engine.sample(contexts, 64, 0.7, max_sentences=3)
    behaviour = [x for sample in samples for x in sample.logprobs]
    found = {}
    for dtype in dtypes:
        policy.set_compute_dtype(resolve_precision(dtype, policy.device).compute)
        old = []
        for context, sample in zip(contexts, samples):
            ids = torch.tensor([context + sample.ids])
            targets = torch.zeros_like(ids, dtype=torch.bool)
            targets[0, len(context) :] = True
            with torch.no_grad():
                logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=0.7)
            old += logp[0].tolist()
        stats = mismatch_stats(np.array(old), np.array(behaviour))
        found.update({f"{dtype}_{key}": value for key, value in vars(stats).items() if key != "tokens"})
    return {"tokens": len(behaviour), **found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--types", nargs="+", default=["F32", "F16", "BF16", "Q8_0"], help="tensor types written from torch")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bf16-mixed"], help="torch precisions to compare with")
    parser.add_argument("--shipped", action="store_true", help="also the shipped Q4_1 file")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(PolicySpec(dtype="float32"))
    tokenizer = str(gguf_tokenizer_folder(embedded_gguf_path()) / "tokenizer.json")
    folder = Path(tempfile.mkdtemp(prefix="mapo-bases-"))
    bases = {"Q4_1 (shipped)": embedded_gguf_path()} if args.shipped else {}
    for kind in args.types:
        started = time.perf_counter()
        bases[kind] = write_model(policy.model, policy.tokenizer, folder / f"{kind}.gguf", default_type=kind, merge_lora=False)
        print(f"wrote {kind} in {time.perf_counter() - started:.1f} s", flush=True)
    results = {}
    for name, path in bases.items():
        results[name] = {**decode_speed(str(path), tokenizer, args.threads), **mismatch(policy, path, args.threads, args.dtypes)}
        print(name, json.dumps(results[name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
