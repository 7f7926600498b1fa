"""Does a small language model's likelihood see what issue 59's blind readers see? (docs/results.md,
twenty-second session). Usage:

    python experiments/empathy_warm/reader_likelihood.py docs/blind/empathy-reask-s0 docs/blind/empathy-again-s*

Each side of a rated pair is read in one pass by the embedded SmolLM2-135M (llama.cpp, its GGUF file)
as a plain-text conversation; a listener reply's figure is the mean log-probability of its tokens. The
side with the higher mean over its replies (and, apart, over its three worst replies) is compared with
the side the reader preferred, over the decisive pairs. About 10 seconds a dialogue on one core.
It needs llama-cpp-python, which mapo no longer installs: `pip install 'llama-cpp-python>=0.3'` first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from llama_cpp import Llama

from mapo.lab.blind.dialogue_sets import Dialogue, blind_pairs, pair_dialogue
from mapo.lab.blind.score import read_ratings
from mapo.model_source import embedded_gguf_path

N_CTX = 2048
OPENING = "A conversation between a person who is struggling and a caring friend.\n"


def reply_logprobs(lm: Llama, dialogue: Dialogue) -> list[float]:
    """Mean token log-probability of each listener reply, the dialogue before it as context."""
    tokens, spans = lm.tokenize(OPENING.encode()), []
    for person, reply in dialogue.turns:
        tokens += lm.tokenize(f"Person: {person}\nFriend:".encode(), add_bos=False)
        said = lm.tokenize(f" {reply}\n".encode(), add_bos=False)
        spans.append((len(tokens), len(tokens) + len(said)))
        tokens += said
    tokens = tokens[: N_CTX - 8]
    lm.reset()
    lm.eval(tokens)
    scores = lm.scores

    def logprob(i: int) -> float:  # of token i, from the logits after token i - 1
        row = scores[i - 1]
        top = row.max()
        return float(row[tokens[i]] - top - np.log(np.exp(row - top).sum()))

    return [float(np.mean([logprob(i) for i in range(a, min(b, len(tokens)))])) for a, b in spans if a < len(tokens)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", help="rated blind sets (folders with key.json and rater/)")
    args = parser.parse_args()
    lm = Llama(model_path=str(embedded_gguf_path()), logits_all=True, n_ctx=N_CTX, n_threads=1, verbose=False)
    total = {"mean": [0, 0], "worst 3": [0, 0]}
    for folder in map(Path, args.sets):
        key, pairs = blind_pairs(folder)
        ratings = {r.pair: r for r in read_ratings(folder / "rater" / "ratings.csv", key["pairs_sha256"], [p["pair"] for p in pairs])}
        counts = {name: [0, 0] for name in total}
        for pair in pairs:
            preferred = ratings[pair["pair"]].preferred
            if preferred == "tie":
                continue
            other = "B" if preferred == "A" else "A"
            sides = {side: reply_logprobs(lm, pair_dialogue(pair, side, str(folder))) for side in "AB"}
            for name, figure in (("mean", np.mean), ("worst 3", lambda v: np.mean(sorted(v)[:3]))):
                counts[name][0 if figure(sides[preferred]) > figure(sides[other]) else 1] += 1
        for name, (agree, disagree) in counts.items():
            total[name][0] += agree
            total[name][1] += disagree
        print(f"{folder}: " + ", ".join(f"{n} picks the reader's side in {a} of {a + d}" for n, (a, d) in counts.items()), flush=True)
    print("pooled: " + ", ".join(f"{n} {a} of {a + d} ({100 * a / max(1, a + d):.1f} %)" for n, (a, d) in total.items()))


if __name__ == "__main__":
    main()
