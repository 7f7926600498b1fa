"""The world-knowledge probe (`mapo bench knowledge`): does a model know the facts of a game's table?

Every (candidate, attribute) pair of a case set's tables is a fact, true or false
(mapo.envs.questioning.cases). The probe draws `count` of them, half true and half false,
and asks each as plain text after `shots` solved examples from the same table:

    Thing: sparrow. Is it made of cloth? no
    Thing: tree. Is it made of wood? yes
    ...
    Thing: horse. Is it alive?

The line names the table's subject, not "a horse", so that "glasses" or "bread" read as well as
"horse"; the question is the attribute's own, verbatim. An example never shares the probe's
candidate nor its attribute (so never its fact), and half of the examples are true. The score is
log p(" yes") - log p(" no") of the continuation, each summed over its tokens (no sampling).

Two figures: the AUC (a true fact's score above a false one's, ties half: the Mann-Whitney
statistic) says whether the model ranks true above false at all, whatever its lean to one answer;
the accuracy at score 0 says whether its plain answer is right. Every draw is seeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mapo.envs.questioning.cases import CaseSet
from mapo.envs.questioning.table import Attribute, Table
from mapo.intervals import LEVEL, clopper_pearson, two_sample_bootstrap

ANSWERS = (" yes", " no")


@dataclass(frozen=True)
class Fact:
    table: Table
    candidate: str
    attribute: Attribute

    @property
    def truth(self) -> bool:
        return self.table.answer(self.candidate, self.attribute.key)

    def line(self) -> str:
        """The fact as the probe asks it, without its answer."""
        subject = self.table.subject[:1].upper() + self.table.subject[1:]
        return f"{subject}: {self.candidate}. {self.attribute.question}"


@dataclass(frozen=True)
class Probe:
    fact: Fact
    shots: tuple[Fact, ...]

    def prompt(self) -> str:
        """The solved examples, one a line, then the probe's own line (the answer is what is scored)."""
        solved = [f"{shot.line()}{ANSWERS[0] if shot.truth else ANSWERS[1]}\n" for shot in self.shots]
        return "".join(solved) + self.fact.line()

    def record(self) -> dict[str, Any]:
        """The probe as one JSON line: its fact (the attribute by the phrase its question says) and its examples."""
        return {"table": self.fact.table.name, "candidate": self.fact.candidate,
                "attribute": self.fact.attribute.label or self.fact.attribute.key, "truth": self.fact.truth,
                "shots": [f"{s.candidate}/{s.attribute.key}" for s in self.shots]}


def table_facts(table: Table) -> list[Fact]:
    return [Fact(table, candidate, attribute) for candidate in table.candidates for attribute in table.attributes]


def _draw(facts: list[Fact], size: int, rng: random.Random, what: str) -> list[Fact]:
    """`size` facts, half true and half false, in a drawn order."""
    true = [f for f in facts if f.truth]
    false = [f for f in facts if not f.truth]
    half = size // 2
    if half > min(len(true), len(false)):
        raise ValueError(f"{what}: {size} need {half} true and {half} false facts; "
                         f"there are {len(true)} true and {len(false)} false")
    drawn = rng.sample(true, half) + rng.sample(false, half)
    rng.shuffle(drawn)
    return drawn


def build_probes(case_set: CaseSet, count: int, shots: int, seed: int = 0) -> list[Probe]:
    """`count` probes over the case set's tables, half of them true; each with `shots` examples
    (half true) from its own table, none with its candidate or its attribute. The same
    arguments give the same probes; a probe's examples are drawn from its own fact and the seed."""
    if count < 2 or count % 2:
        raise ValueError(f"--probes must be an even number >= 2 (half true, half false), got {count}")
    if shots < 0 or shots % 2:
        raise ValueError(f"--shots must be an even number >= 0 (half true, half false), got {shots}")
    facts = [fact for table in case_set.tables for fact in table_facts(table)]
    probes = []
    for fact in _draw(facts, count, random.Random(f"probes|{seed}"), f"{case_set.path}: {count} probes"):
        others = [f for f in table_facts(fact.table)
                  if f.candidate != fact.candidate and f.attribute.key != fact.attribute.key]
        rng = random.Random(f"shots|{seed}|{fact.table.name}|{fact.candidate}|{fact.attribute.key}")
        where = f"{case_set.path}: table {fact.table.name!r}, {shots} examples for {fact.candidate}/{fact.attribute.key}"
        probes.append(Probe(fact, tuple(_draw(others, shots, rng, where))))
    return probes


# ---------------------------------------------------------------- scoring


def _answer_ids(tokenizer: Any, prompt: str, answer: str) -> tuple[list[int], int]:
    """(ids of prompt + answer as the model reads plain text, where the answer's ids begin)."""
    prefix = tokenizer(prompt)["input_ids"]
    ids = tokenizer(prompt + answer)["input_ids"]
    if ids[: len(prefix)] != prefix or len(ids) == len(prefix):
        raise ValueError(f"the tokenizer does not keep {prompt[-30:]!r} whole before {answer!r}; "
                         "the answer's log-probability cannot be read off")
    return ids, len(prefix)


def score_probes(policy: Any, probes: Sequence[Probe], batch_size: int = 16,
                 advance: Callable[[int], None] | None = None) -> np.ndarray:
    """log p(" yes") - log p(" no") after each probe's prompt, under `policy` (mapo.policy.Policy).

    The yes and no sequences of all probes are sorted by length and right-padded in batches of
    `batch_size`, so a batch's answers sit at a few positions: only their logits are computed
    (Gemma's vocabulary has 262k entries)."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    sequences = [_answer_ids(policy.tokenizer, probe.prompt(), answer) for probe in probes for answer in ANSWERS]
    order = sorted(range(len(sequences)), key=lambda k: len(sequences[k][0]))
    totals = np.zeros(len(sequences))
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        width = max(len(sequences[k][0]) for k in chosen)
        ids = torch.full((len(chosen), width), policy.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        targets = torch.zeros_like(ids, dtype=torch.bool)
        for row, k in enumerate(chosen):
            tokens, begin = sequences[k]
            ids[row, : len(tokens)] = torch.tensor(tokens)
            mask[row, : len(tokens)] = 1
            targets[row, begin : len(tokens)] = True
        with torch.no_grad():
            logp, _ = policy.token_logprobs(ids, mask, targets)
        kept = targets[:, targets.any(dim=0)]  # the [B, J] positions token_logprobs returned
        totals[chosen] = (logp.float().cpu() * kept).sum(dim=1).numpy()
        if advance is not None:
            advance(len(chosen) // 2)
    return totals[0::2] - totals[1::2]


# ---------------------------------------------------------------- figures


def rank_auc(positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray) -> float:
    """P(a positive's score > a negative's), ties counted half: the Mann-Whitney U / (n+ n-)."""
    pos = np.asarray(positive, dtype=float)
    neg = np.asarray(negative, dtype=float)
    if not pos.size or not neg.size:
        raise ValueError(f"an AUC needs positives and negatives, got {pos.size} and {neg.size}")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise ValueError("an AUC of scores that are not all finite")
    above = (pos[:, None] > neg[None, :]).sum()
    tied = (pos[:, None] == neg[None, :]).sum()
    return float((above + 0.5 * tied) / (pos.size * neg.size))


def summarise(truths: Sequence[bool], scores: Sequence[float] | np.ndarray, level: float = LEVEL) -> dict[str, Any]:
    """AUC with a bootstrap interval (true and false facts each redrawn at their own number), accuracy
    at score 0 (a score of exactly 0 answers no) with its exact binomial interval, and how often it says yes."""
    truth = np.asarray(truths, dtype=bool)
    score = np.asarray(scores, dtype=float)
    auc_low, auc_high = two_sample_bootstrap(score[truth], score[~truth], rank_auc, level=level)
    says_yes = score > 0
    correct = int((says_yes == truth).sum())
    accuracy_low, accuracy_high = clopper_pearson(correct, truth.size, level)
    return {
        "probes": int(truth.size), "true": int(truth.sum()), "level": level,
        "auc": rank_auc(score[truth], score[~truth]), "auc_low": auc_low, "auc_high": auc_high,
        "accuracy": correct / truth.size, "accuracy_low": accuracy_low, "accuracy_high": accuracy_high,
        "yes_rate": float(says_yes.mean()),
        "mean_score_true": float(score[truth].mean()), "mean_score_false": float(score[~truth].mean()),
    }
