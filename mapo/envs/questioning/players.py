"""Reference players of the questioning game, usable wherever a policy is (`--model player:optimal`).

A player is a text-only policy (mapo.core.rollout.ChatPolicy): it gets each dialogue as chat
messages and returns a reply, so it goes through the same rollout as a model. It reads
only the conversation: the opening message gives the pool and the askable questions, which
identify the table (its world knowledge) among the bundled case sets and every case file this
process has loaded (a game loads its scenario's case file at reset, so a user's own file is
known before its first opening is read); each earlier reply with the user's answer is replayed
with the game's own parser (parse.py) to know what is still consistent. It never sees the secret.

- optimal: the unasked attribute that splits the consistent candidates most evenly
  (ties: the table's order);
- informative: a uniformly random attribute among those whose answer still splits the
  consistent candidates (any question that teaches something, none that cannot);
- random: a uniformly random unasked attribute (whether or not it splits anything).

Each names the candidate once one is left. Random draws come from one generator seeded at
construction and consumed in call order, so a run is reproducible. All three name the first
consistent candidate when the game says one reply is left (`show_turns_left`): a guess among
n wins 1 / n of those games, a question none. Under `view: state` the conversation is the state
alone (its candidates still possible and questions not asked yet), and the players read that.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from mapo.envs.questioning.cases import BUNDLED, bundled_case_file, load_case_set, loaded_case_sets
from mapo.envs.questioning.env import NOT_ASKED, turns_left_note
from mapo.envs.questioning.game import consistent
from mapo.envs.questioning.parse import parse_reply
from mapo.envs.questioning.table import Attribute, Table

PLAYER_PREFIX = "player:"
PLAYERS = ("optimal", "informative", "random")

Conversation = list[dict[str, str]]


def known_tables() -> list[Table]:
    """The tables of the case files this process has loaded (a user's own first), then the bundled ones."""
    bundled = [load_case_set(bundled_case_file(name)) for name in BUNDLED]
    own = [case_set for case_set in loaded_case_sets() if case_set.path not in {b.path for b in bundled}]
    return [t for case_set in own + bundled for t in case_set.tables]


def read_opening(opening: str, tables: Sequence[Table]) -> tuple[Table, list[str]]:
    """(table, pool) from the game's opening message (env.opening_message): the first table whose
    questions and candidates it lists; refused when two such tables disagree about the pool."""
    lines = opening.splitlines()
    found: list[tuple[Table, list[str]]] = []
    for table in tables:
        questions = " ".join(a.question for a in table.attributes)
        for k, line in enumerate(lines):
            if k > 0 and line.endswith(questions):
                pool = lines[k - 1].partition(": ")[2].removesuffix(".").split(", ")
                if pool and all(name in table.facts for name in pool):
                    found.append((table, pool))
                    break
    if not found:
        raise ValueError(f"the opening message is not that of a known questioning game (the bundled case sets and "
                         f"the case files loaded: the scenarios' own): {opening[:120]!r}")
    table, pool = found[0]
    for other, _ in found[1:]:
        if any(other.facts[c] != table.facts[c] for c in pool):
            raise ValueError(f"the opening message lists the questions and candidates of two tables that disagree "
                             f"about them ({table.name!r} and {other.name!r}); give the candidates or questions "
                             "of one of them other names")
    return table, pool


def read_state(message: str, tables: Sequence[Table]) -> tuple[Table, list[str], list[str]] | None:
    """(table, candidates still possible, attribute keys not asked yet) from a state-view message
    (env.state_message), or None when `message` is not one."""
    lines = message.splitlines()
    asked_line = next((line for line in lines if f" {NOT_ASKED}:" in line), None)
    left_line = next((line for line in lines if " still possible: " in line), None)
    if asked_line is None or left_line is None:
        return None
    left = left_line.partition(" still possible: ")[2].removesuffix(".").split(", ")
    questions = asked_line.partition(f" {NOT_ASKED}:")[2].strip()
    for table in tables:
        unasked = _listed_keys(table, questions)
        if unasked is not None and all(name in table.facts for name in left):
            return table, left, unasked
    raise ValueError(f"the state message is not that of a known questioning game: {message[:120]!r}")


def _listed_keys(table: Table, questions: str) -> list[str] | None:
    """The keys of `table`'s attributes whose questions `questions` lists in the table's order, or
    None when it lists anything else."""
    keys, rest = [], questions
    for attribute in table.attributes:
        if rest == attribute.question or rest.startswith(attribute.question + " "):
            keys.append(attribute.key)
            rest = rest[len(attribute.question):].lstrip()
    return keys if not rest else None


class Player:
    """A reference player (see the module docstring); `kind` is optimal, informative or random."""

    def __init__(self, kind: str, seed: int = 0) -> None:
        if kind not in PLAYERS:
            raise ValueError(f"unknown player {kind!r}; players: {', '.join(PLAYERS)}")
        self.kind = kind
        self.name = f"{PLAYER_PREFIX}{kind}"
        self.rng = random.Random(seed)

    def chat_replies(self, conversations: list[Conversation], max_new_tokens: int = 0, temperature: float = 0.0,
                     top_p: float = 1.0) -> list[str]:
        return [self.reply(c) for c in conversations]

    def reply(self, conversation: Conversation) -> str:
        said = [m for m in conversation if m["role"] != "system"]
        if not said or said[0]["role"] != "user":
            raise ValueError("a game conversation starts with the user's opening message")
        state = read_state(said[-1]["content"], known_tables())
        if state is not None:
            table, left, unasked_keys = state
            return self._choose(table, left, [table.attribute(k) for k in unasked_keys], said[-1]["content"])
        table, pool = read_opening(said[0]["content"], known_tables())
        answers: dict[str, bool] = {}
        wrong: set[str] = set()
        for mine, theirs in zip(said[1::2], said[2::2]):
            move = parse_reply(mine["content"], table)
            if move.kind == "question" and move.attribute is not None:
                answers[move.attribute] = theirs["content"].startswith("Yes")
            elif move.kind == "guess" and theirs["content"].startswith("No"):
                wrong.add(str(move.candidate))
        left = consistent(table, pool, answers, wrong) or [c for c in pool if c not in wrong]
        return self._choose(table, left, [a for a in table.attributes if a.key not in answers], said[-1]["content"])

    def _choose(self, table: Table, left: list[str], unasked: list[Attribute], last_message: str) -> str:
        """The player's reply with `left` candidates still possible and `unasked` questions left."""
        if len(left) == 1 or last_message.endswith(turns_left_note(1)):
            return f"Guess: {left[0]}"
        if not unasked:  # every attribute asked: the table tells all candidates apart, so this is rare
            return f"Guess: {left[0]}"
        if self.kind == "random":
            return self.rng.choice(unasked).question

        def imbalance(key: str) -> int:
            yes = sum(table.answer(c, key) for c in left)
            return abs(2 * yes - len(left))

        splitting = [a for a in unasked if imbalance(a.key) < len(left)]
        if self.kind == "informative" and splitting:  # two candidates left differ on an unasked attribute
            return self.rng.choice(splitting).question
        return min(unasked, key=lambda a: imbalance(a.key)).question


def is_player(model: str) -> bool:
    return model.startswith(PLAYER_PREFIX)


def load_player(model: str, seed: int = 0) -> Player:
    """The player `player:<kind>` names."""
    return Player(model.removeprefix(PLAYER_PREFIX), seed)
