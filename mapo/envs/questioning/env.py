"""The questioning game as an environment (mapo.envs.base protocol): `twenty-questions` and
`troubleshooting`, one class each over the same rules (mapo.envs.questioning.game).

A scenario is one secret of a table (`<table>/<secret>`); at reset the environment draws
the pool, `pool_size` candidates holding the secret, from the scenario id, `pool_size` and
`pool_seed` (cases.draw_pool), so every dialogue of a group plays the same secret and pool.
The opening user message lists the pool and the askable questions; the system prompt
(static) gives the rules. The user's replies are short and exact: "Yes." / "No." (", as I
said." on a repeat), the guess's verdict, or one line saying what may be asked.

K = 1: state = (-D_t,), action = (D_{t-1} - D_t,), so ||P_t|| = D_t and IDR is each turn's
gain (bits of information, plus `solve_bits` for the right guess; game.py). ADR and outcome
work unchanged. The game ends "success" on the right guess, "failure" on a wrong guess beyond
the `wrong_guesses_allowed` (default 0: one guess, as in the parlour game), and "timeout" after
`max_turns` replies (default 2 * ceil(log2(pool_size)) + 1: 7 turns at pool 8, where the
optimal questioner needs about 4). A forgiven wrong guess takes the candidate out of the pool.
The system prompt states the guessing rule in force.

`show_candidates` (default off) ends each reply of a game still going with the candidates
still consistent ("Still possible: horse, turtle."): the deduction is then done for the
policy, which is left to choose questions that narrow the pool and to guess in time. A small
model that cannot recall which candidates are alive or metal can learn that game; without
the list it must keep every answer in mind (docs/games.md).
Why one guess by default: with wrong guesses free, guessing down the list solves max_turns /
pool_size of the games (7 of 8 at pool 8) without a single question, so "success" would not
measure questioning; with one guess it solves 1 / pool_size.

`forfeit_on_failure` (default off): a lost game (a wrong guess beyond those allowed) returns
the need to where it started, D_T = D_0, so the IDR of the losing turn takes back every bit the
dialogue had earned and a lost game's rewards sum to 0, as its outcome does. Without it a wrong
guess among n candidates still pays log2(n / (n - 1)) bits, and a guess's expected immediate
reward, (log2(n) + 1) / n + (n - 1) / n * log2(n / (n - 1)), beats a perfect question's 1 bit
at n <= 4: a reward read turn by turn then pays guessing early (docs/games.md).
`forfeit_on_timeout` (default off) does the same for a game that runs out of turns unsolved:
with lost games forfeited and timeouts not, a policy that never guesses keeps its bits and
one that guesses risks them, and RL from the warm start learned to stop guessing (docs/games.md).
`show_turns_left` (default off) ends the opening and each reply of a game still going with the
replies left ("3 replies left."); the reference players then name a candidate with one reply
left rather than time out. Without it the policy sees the candidates but not the turn budget,
so the state it acts on is aliased: guessing with few candidates and many turns left loses games
a question would win, guessing on the last reply wins games a question would time out, and the
policy sees no difference between the two. RL learned to guess by candidates left alone (no
trained policy guessed on its last reply more than a point more often than before it; docs/results.md).

`need` (default `bits`) is what the distance measures. `bits`: the information still missing,
log2(n_t) + solve_bits (game.py), so each turn earns the bits it gained, whatever the budget.
`chance`: the chance that even the best questioner fails from here, 1 - min(n_t, 2^(r_t - 1)) / n_t
with r_t replies left (game.win_chance), 0 once solved and 1 once lost or timed out. A question
that keeps the best player's chance costs nothing, a reply that wastes the budget (a re-asked
question once the slack is gone, a lopsided split) costs on its own turn, and a guess is charged
only the chance it throws away, so the turn-by-turn reading that MAPO's immediate half takes
carries the budget. A game's rewards sum to its outcome minus the best player's chance at the
start. It ends a lost game at the full distance itself, so it takes no forfeits, and it assumes
one guess.

`show_table` (default off) puts the table in view: the opening lists, under the questions, what
is true of each candidate of the pool (`horse: alive, animal, big, legs`; a fault: the checks
that answer yes), and each reply of a game still going re-lists the candidates still possible
with theirs (it stands in for `show_candidates`' line). Each attribute is named by the phrase
its listed question says. The parser, the reward and the answers are unchanged: only what the
user says differs. Without it the policy must know which things are alive or metal (world
knowledge); with it, what is left is strategy: which question splits the candidates left,
and when to guess (docs/games.md).

Options: pool_size (default 8), max_turns, solve_bits (1.0), wrong_guesses_allowed (0), pool_seed (0),
show_candidates (false), forfeit_on_failure (false), forfeit_on_timeout (false), show_turns_left (false),
show_table (false), need (bits).
Scenarios (`env.scenarios`, `mapo eval --scenarios`): train | test | all of the bundled
case set, or a case file `path.yaml` (all its secrets) or `path.yaml:train|test`.
"""

from __future__ import annotations

import math
from typing import Any

from mapo.envs.base import StepResult
from mapo.envs.questioning.cases import (
    SPLITS,
    CaseError,
    bundled_case_file,
    case_scenarios,
    draw_pool,
    load_case_set,
)
from mapo.envs.questioning.game import GameState, chance_distance
from mapo.envs.questioning.metrics import game_summary
from mapo.envs.questioning.parse import parse_reply
from mapo.envs.questioning.table import Table
from mapo.types import Scenario

NEEDS = ("bits", "chance")
TRANSCRIPT_KEYS = ("kind", "bits", "attribute", "guess", "reason", "candidates_left", "pool_size", "secret")


def default_max_turns(pool_size: int) -> int:
    return 2 * math.ceil(math.log2(pool_size)) + 1


def opening_message(table: Table, pool: list[str], labels: tuple[str, ...], show_table: bool = False) -> str:
    """The pool and the askable questions, in the exact form the reference players read back;
    with `show_table`, then what is true of each candidate (`labels[2]` heads it)."""
    lines = [table.intro] if table.intro else []
    lines.append(f"{labels[0]}: {', '.join(pool)}.")
    lines.append(f"{labels[1]}: {' '.join(a.question for a in table.attributes)}")
    if show_table:
        lines += [f"{labels[2]}:", *fact_lines(table, pool)]
    return "\n".join(lines)


def fact_lines(table: Table, candidates: list[str]) -> list[str]:
    """One line per candidate: its name and the labels of what is true of it ("-" for nothing)."""
    return [f"{name}: {', '.join(table.true_of(name)) or '-'}" for name in candidates]


def turns_left_note(replies: int) -> str:
    """How a game with `show_turns_left` states its budget (the reference players read it back)."""
    return f"{replies} {'reply' if replies == 1 else 'replies'} left."


class QuestioningEnvironment:
    """One game: the policy asks, the table answers (see the module docstring)."""

    case_set = "twenty-questions"
    labels = ("Candidates", "Questions", "True of each (the rest is false)")
    system_prompt = (
        "We play twenty questions. I secretly picked one of the candidates. Ask one listed yes/no "
        "question per reply. When you know it, reply Guess: <name>. You have one guess."
    )
    transcript_keys = TRANSCRIPT_KEYS
    reference_players = ("player:optimal", "player:informative", "player:random")
    reply_limits = {"max_new_tokens": 32, "max_sentences": 1}  # one short question or guess per reply
    dialogue_summary = staticmethod(game_summary)

    def __init__(self, pool_size: int = 8, max_turns: int | None = None, solve_bits: float = 1.0,
                 wrong_guesses_allowed: int = 0, pool_seed: int = 0, show_candidates: bool = False,
                 forfeit_on_failure: bool = False, forfeit_on_timeout: bool = False,
                 show_turns_left: bool = False, show_table: bool = False, need: str = "bits") -> None:
        if not isinstance(pool_size, int) or pool_size < 2:
            raise ValueError(f"{self.case_set}: pool_size must be an integer >= 2, got {pool_size!r}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"{self.case_set}: max_turns must be at least 1, got {max_turns}")
        if not solve_bits > 0:
            raise ValueError(f"{self.case_set}: solve_bits must be > 0 (a right guess must pay more than a timeout), got {solve_bits}")
        if not isinstance(wrong_guesses_allowed, int) or wrong_guesses_allowed < 0:
            raise ValueError(f"{self.case_set}: wrong_guesses_allowed must be an integer >= 0, got {wrong_guesses_allowed!r}")
        for name, flag in (("show_candidates", show_candidates), ("forfeit_on_failure", forfeit_on_failure),
                           ("forfeit_on_timeout", forfeit_on_timeout), ("show_turns_left", show_turns_left),
                           ("show_table", show_table)):
            if not isinstance(flag, bool):
                raise ValueError(f"{self.case_set}: {name} must be true or false, got {flag!r}")
        # the endings whose rewards are taken back (the need returns to D_0)
        self.forfeited = {reason for reason, on in (("failure", forfeit_on_failure), ("timeout", forfeit_on_timeout)) if on}
        if need not in NEEDS:
            raise ValueError(f"{self.case_set}: need must be one of {', '.join(NEEDS)}, got {need!r}")
        if need == "chance" and (self.forfeited or wrong_guesses_allowed):
            raise ValueError(f"{self.case_set}: need: chance ends a lost game at the full distance itself and "
                             "assumes one guess; leave forfeit_on_failure, forfeit_on_timeout and wrong_guesses_allowed unset")
        self.need = need
        self.wrong_guesses_allowed = wrong_guesses_allowed
        if wrong_guesses_allowed:  # the class's prompt states the default rule, one guess
            self.system_prompt = self.system_prompt.replace(
                "You have one guess.", f"You have {wrong_guesses_allowed + 1} guesses.")
        self.show_candidates = show_candidates
        self.show_turns_left = show_turns_left
        self.show_table = show_table
        self.pool_size = pool_size
        self.max_turns = max_turns or default_max_turns(pool_size)
        self.solve_bits = float(solve_bits)
        self.pool_seed = pool_seed
        self.game: GameState | None = None

    # -- how scenarios load and how evaluation adapts the options (mapo.envs.base)

    @classmethod
    def load_scenarios(cls, source: str) -> list[Scenario]:
        """A split of the bundled case set, or a case file (`path.yaml`, `path.yaml:split`)."""
        if source in SPLITS:
            return case_scenarios(load_case_set(bundled_case_file(cls.case_set)), source)
        path, _, split = source.partition(".yaml:")
        path = path + ".yaml" if split else source
        return case_scenarios(load_case_set(path), split or "all")

    @staticmethod
    def evaluation_options(training_options: dict[str, Any]) -> dict[str, Any]:
        """The game's rules (its turn limit included) are the same in training and evaluation."""
        return dict(training_options)

    @staticmethod
    def with_turn_cap(options: dict[str, Any], max_turns: int) -> dict[str, Any]:
        """The game keeps its own turn limit (default or set); the evaluation's cap only bounds it
        from outside, except when the budget is shown (`show_turns_left`): a cap below the game's
        limit then becomes it, so the replies left it states are the replies the policy gets."""
        pool_size = options.get("pool_size", 8)
        if options.get("show_turns_left") is not True or not isinstance(pool_size, int) or pool_size < 2:
            return dict(options)  # an invalid option is reported by the environment itself
        if max_turns < (options.get("max_turns") or default_max_turns(pool_size)):
            return {**options, "max_turns": max_turns}
        return dict(options)

    # -- the protocol

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        card = scenario.card
        try:
            case_set = load_case_set(card["cases"])
            table = case_set.table(card["table"])
            secret = card["secret"]
        except KeyError as err:
            raise CaseError(f"scenario {scenario.id!r} is not a questioning-game scenario (its card lacks {err})") from None
        try:
            pool = draw_pool(table, secret, self.pool_size, scenario.id, self.pool_seed)
        except CaseError as err:
            raise CaseError(f"{case_set.path}: {err}") from None
        self.game = GameState(table, secret, pool, self.solve_bits)
        self.turn = 0
        self.done_reason: str | None = None
        opening = opening_message(table, pool, self.labels, self.show_table)
        return f"{opening}\n{turns_left_note(self.max_turns)}" if self.show_turns_left else opening

    def step(self, response: str) -> StepResult:
        if self.game is None:
            raise RuntimeError("call reset(scenario) before step()")
        if self.done_reason is not None:
            raise RuntimeError(f"the game has ended ({self.done_reason}); call reset() to start another")
        if not isinstance(response, str):
            raise TypeError(f"response must be a string, got {type(response).__name__}")
        before = self._distance()
        outcome = self.game.play(parse_reply(response, self.game.table))
        self.turn += 1
        if self.game.solved:
            self.done_reason = "success"
        elif len(self.game.wrong_guesses) > self.wrong_guesses_allowed:
            self.done_reason = "failure"
        elif self.turn >= self.max_turns:
            self.done_reason = "timeout"
        distance = self.game.initial_distance() if self.done_reason in self.forfeited else self._distance()
        info = {
            "turn": self.turn,
            "kind": outcome.kind,
            "bits": outcome.bits,
            "attribute": outcome.attribute,
            "guess": outcome.guess,
            "reason": outcome.reason,
            "candidates_left": len(self.game.consistent()),
            "pool_size": len(self.game.pool),
            "secret": self.game.secret,
            "state": (-distance,),
            "distance": distance,
            "done_reason": self.done_reason,
        }
        reply = outcome.reply
        if self.show_table and self.done_reason is None:
            reply += "\n".join([" Still possible:", *fact_lines(self.game.table, self.game.consistent())])
        elif self.show_candidates and self.done_reason is None:
            reply += f" Still possible: {', '.join(self.game.consistent())}."
        if self.show_turns_left and self.done_reason is None:  # on a line of its own below a table
            reply += ("\n" if self.show_table else " ") + turns_left_note(self.max_turns - self.turn)
        return StepResult(reply, (before - distance,), self.done_reason is not None, info)

    def _distance(self) -> float:
        """The need left now (the module docstring's `need`)."""
        assert self.game is not None
        if self.need == "bits":
            return self.game.distance()
        if self.game.solved:
            return 0.0
        if self.done_reason is not None:
            return 1.0
        return chance_distance(len(self.game.consistent()), self.max_turns - self.turn)

    @property
    def initial_state(self) -> tuple[float]:
        if self.game is None:
            raise RuntimeError("call reset(scenario) first")
        if self.need == "chance":
            return (-chance_distance(len(self.game.pool), self.max_turns),)
        return (-self.game.initial_distance(),)


class TwentyQuestionsEnvironment(QuestioningEnvironment):
    """Everyday things (mapo/data/games/twenty-questions.yaml)."""


class TroubleshootingEnvironment(QuestioningEnvironment):
    """A customer's broken device: find the fault by checks the customer can answer
    (mapo/data/games/troubleshooting.yaml); the right guess's reply gives the fix."""

    case_set = "troubleshooting"
    labels = ("Possible faults", "Checks", "Checks that answer yes for each fault (the rest answer no)")
    system_prompt = (
        "You are a support agent. The customer's device has one of the possible faults. Ask one "
        "listed yes/no check per reply. When you know it, reply Guess: <fault>. You have one guess."
    )
