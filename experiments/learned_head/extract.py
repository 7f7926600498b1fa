"""Featurise every exemplar (blind7 excluded) once and cache to features.npz.

X: a fixed numeric vector per reply from the judge's own `Features`, a few whole-reply
cosines, and the rules' six levels (numbers and one-hot). Labels: the expected levels.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from mapo.envs import embeddings
from mapo.envs.dynamics import LEVEL_KEYS, levels_to_vector
from mapo.envs.empathy.offline.features import MIN_WORDS, extract_features
from mapo.envs.empathy.offline.judge import RAMBLING_WORDS, OfflineJudge, levels_from_features
from mapo.envs.empathy.offline.judge_lexicon import DEEP_FEELINGS, PATTERN_FAMILIES

sys.path.insert(0, str(Path(__file__).parent))
from data import FORBIDDEN, load, part_of  # noqa: E402

HIT_FAMILIES = list(PATTERN_FAMILIES)
DEGENERATE = ["loop", "fragment", "role_swap", "invented", "keyword_stuffing", "word_salad", "off_topic"]
MOVES = ["C1", "C2", "A1", "A2", "P1", "P2"]
LEVEL_CLASSES = {k: ([0, 1, 2] if k.endswith("prog") else [0, -1, -2]) for k in LEVEL_KEYS}


def names() -> list[str]:
    n = ["grounding", "ground_sem", "advice_fit", "cue_C", "cue_A", "cue_P"]
    n += [f"ex_{m}" for m in MOVES]
    n += ["shared_capped", "shared_ge2", "n_words_100", "short", "rambling", "n_sent", "n_dir", "dir_share",
          "all_directives", "n_q", "n_feel", "n_unstated", "n_unstated_deep", "n_hedged", "repetition", "has_own_turns"]
    n += [f"hit_{h}" for h in HIT_FAMILIES]
    n += [f"hit_{h}_sem" for h in ("template", "minimising", "invalidating", "moralising")]
    n += [f"deg_{d}" for d in DEGENERATE] + ["deg_any"]
    n += [f"deepest_{a}" for a in "CAP"]
    n += ["cos_reply_last_user", "cos_reply_situation", "cos_reply_user_all"]
    n += [f"rule_{k}" for k in LEVEL_KEYS]
    n += [f"rule_{k}={v}" for k in LEVEL_KEYS for v in LEVEL_CLASSES[k][1:]]
    n += ["rule_proj"]
    return n


def vector(e, f, rule_lv, cos3) -> list[float]:
    h = f.hits
    x = [f.grounding, f.ground_sem, f.advice_fit, f.cue["C"], f.cue["A"], f.cue["P"]]
    x += [f.exemplar[m] for m in MOVES]
    ns = max(len(f.sentences), 1)
    x += [min(len(f.shared), 5) / 5, float(len(f.shared) >= 2), f.n_words / 100, float(f.n_words < MIN_WORDS),
          float(f.n_words > RAMBLING_WORDS), min(ns, 10), min(len(f.directives), 5), len(f.directives) / ns,
          float(f.sentences == f.directives), min(len(f.questions), 3), min(len(f.feelings), 5),
          min(len(f.unstated_feelings), 5), min(sum(w in DEEP_FEELINGS for w in f.unstated_feelings), 3),
          min(len(f.hedged_unstated), 3), f.repetition, float(bool(e.context.own_turns))]
    x += [min(len(h.get(k, [])), 3) for k in HIT_FAMILIES]
    x += [min(sum(s.startswith("(close to a") for s in h.get(k, [])), 3)
          for k in ("template", "minimising", "invalidating", "moralising")]
    x += [float(d in f.degenerate) for d in DEGENERATE] + [float(bool(f.degenerate))]
    x += [float(e.context.deepest_axis == a) for a in "CAP"]
    x += list(cos3)
    x += [float(rule_lv[k]) for k in LEVEL_KEYS]
    x += [float(rule_lv[k] == v) for k in LEVEL_KEYS for v in LEVEL_CLASSES[k][1:]]
    x += [float(np.dot(levels_to_vector(rule_lv), e.target))]
    return x


def main(out: str) -> None:
    t0 = time.time()
    ex = load()
    ex = [e for e in ex if not e.context_id.startswith(FORBIDDEN)]
    print(f"{len(ex)} exemplars loaded ({time.time() - t0:.0f}s)", flush=True)
    judge = OfflineJudge()
    judge.prime([(e.context, e.response) for e in ex])
    whole = [t for e in ex for t in (e.response, e.context.user_turns[-1], e.context.situation, " ".join(e.context.user_turns))]
    embeddings.embed(list(dict.fromkeys(whole)))
    print(f"primed ({time.time() - t0:.0f}s)", flush=True)
    X, Y, R = [], [], []
    for i, e in enumerate(ex):
        f = extract_features(e.context, e.response)
        lv, _ = levels_from_features(f, e.context.deepest_axis)
        v = embeddings.embed([e.response, e.context.user_turns[-1], e.context.situation, " ".join(e.context.user_turns)])
        cos3 = (float(v[0] @ v[1]), float(v[0] @ v[2]), float(v[0] @ v[3]))
        X.append(vector(e, f, lv, cos3))
        Y.append([e.expected[k] for k in LEVEL_KEYS])
        R.append([lv[k] for k in LEVEL_KEYS])
        if i % 200 == 0:
            print(i, f"{time.time() - t0:.0f}s", flush=True)
    np.savez_compressed(
        out,
        X=np.asarray(X, dtype=np.float32),
        names=np.asarray(names()),
        Y=np.asarray(Y, dtype=np.int8),
        R=np.asarray(R, dtype=np.int8),
        part=np.asarray([part_of(e.context_id, e.split) for e in ex]),
        context_id=np.asarray([e.context_id for e in ex]),
        target=np.asarray([e.target for e in ex], dtype=np.float64),
        family=np.asarray([e.family or "" for e in ex]),
        degenerate=np.asarray([x[names().index("deg_any")] for x in X], dtype=bool),
    )
    assert len(names()) == len(X[0]), (len(names()), len(X[0]))
    print(f"saved {out}: X {np.shape(X)} ({time.time() - t0:.0f}s)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "features.npz"))
