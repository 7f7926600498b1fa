"""One game's state and rules, without text generation or the environment protocol.

State: the pool, the answers given (attribute -> bool) and the wrongly guessed candidates.
The candidates still consistent are the pool members that agree with every answer and
were not guessed wrongly; n_t is their number.

Distance (the K = 1 need, mapo.core.rewards): D_t = log2(n_t) + solve_bits while unsolved, 0
once solved. The `solve_bits` (default 1) are paid only by the right guess: without them
a dialogue that narrowed the pool to one candidate and never guessed would score as a
solved one. So a solved game returns log2(pool) + solve_bits under IDR, a game that ends
unsolved at most log2(pool), and each turn's IDR is the information it gained,
log2(n_{t-1} / n_t), plus solve_bits on the right guess.

The environment's `need: chance` measures the distance otherwise: the chance that even the
best questioner fails from here (`win_chance`), so a reply that wastes the budget costs on its turn.

Moves (mapo.envs.questioning.parse):
- question on a new attribute: answered from the table; kind "question";
- question on an attribute already answered: the same answer again; kind "repeat";
- guess of the secret: solved; kind "guess_right";
- guess of another pool member not guessed before: it leaves the pool; kind "guess_wrong";
- guess of a candidate already guessed: the same "No" again; kind "repeat";
- anything else (including a guess outside the pool): kind "invalid", nothing learned.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from mapo.envs.questioning.parse import INVALID_REASONS, Move
from mapo.envs.questioning.table import Table

KINDS = ("question", "repeat", "invalid", "guess_right", "guess_wrong")


def consistent(table: Table, pool: Sequence[str], answers: Mapping[str, bool], excluded: Collection[str]) -> list[str]:
    """The pool members that agree with every answer and are not `excluded` (guessed wrongly)."""
    return [c for c in pool if c not in excluded and all(table.answer(c, a) == v for a, v in answers.items())]


def win_chance(candidates: int, replies_left: int) -> float:
    """The best questioner's chance to win with one guess: r - 1 questions split n candidates
    into at most 2^(r-1) groups and the last reply names one of its group, so it wins
    min(n, 2^(r-1)) / n of the games (questions free to split any way; a table may allow less)."""
    if candidates < 1 or replies_left < 1:
        raise ValueError(f"a game still going has candidates and replies left, got {candidates} and {replies_left}")
    return min(candidates, 2 ** (replies_left - 1)) / candidates


def chance_distance(candidates: int, replies_left: int) -> float:
    """`need: chance`'s distance of a game still going: the best questioner's chance of failing."""
    return 1.0 - win_chance(candidates, replies_left)


@dataclass
class Outcome:
    """What one move did: its kind, the user's reply text, the bits it gained."""

    kind: str
    reply: str
    bits: float
    attribute: str | None = None
    guess: str | None = None
    reason: str | None = None


@dataclass
class GameState:
    table: Table
    secret: str
    pool: list[str]
    solve_bits: float = 1.0
    answers: dict[str, bool] = field(default_factory=dict)
    wrong_guesses: list[str] = field(default_factory=list)
    solved: bool = False

    def __post_init__(self) -> None:
        if self.secret not in self.pool:
            raise ValueError(f"the secret {self.secret!r} is not in the pool {self.pool}")
        if not self.solve_bits > 0:
            raise ValueError(f"solve_bits must be > 0 (a right guess must pay), got {self.solve_bits}")

    def consistent(self) -> list[str]:
        """The pool members that agree with every answer and were not guessed wrongly."""
        if self.solved:
            return [self.secret]
        return consistent(self.table, self.pool, self.answers, self.wrong_guesses)

    def distance(self) -> float:
        return 0.0 if self.solved else math.log2(len(self.consistent())) + self.solve_bits

    def initial_distance(self) -> float:
        return math.log2(len(self.pool)) + self.solve_bits

    def play(self, move: Move) -> Outcome:
        """Apply `move`; the outcome's bits are log2(n before / n after) (the information gained)."""
        if self.solved:
            raise RuntimeError("the game is already solved")
        before = len(self.consistent())
        outcome = self._apply(move)
        after = 1 if self.solved else len(self.consistent())
        outcome.bits = math.log2(before / after)
        return outcome

    def _apply(self, move: Move) -> Outcome:
        if move.kind == "question":
            assert move.attribute is not None
            value = self.table.answer(self.secret, move.attribute)
            word = "Yes" if value else "No"
            if move.attribute in self.answers:
                return Outcome("repeat", f"{word}, as I said.", 0.0, attribute=move.attribute)
            self.answers[move.attribute] = value
            return Outcome("question", f"{word}.", 0.0, attribute=move.attribute)
        if move.kind == "guess" and move.candidate in self.pool:
            name = move.candidate
            if name == self.secret:
                self.solved = True
                fix = self.table.fixes.get(name)
                return Outcome("guess_right", f"Yes, the answer is {name}." + (f" Fix: {fix}" if fix else ""), 0.0, guess=name)
            if name in self.wrong_guesses:
                return Outcome("repeat", f"No, as I said: the answer is not {name}.", 0.0, guess=name)
            self.wrong_guesses.append(name)
            return Outcome("guess_wrong", f"No, the answer is not {name}.", 0.0, guess=name)
        reason = move.reason or "unknown_guess"  # a guess of a name outside the pool
        return Outcome("invalid", INVALID_REASONS[reason], 0.0, reason=reason)
