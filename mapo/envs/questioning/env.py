"""The questioning game as an environment (mapo.envs.base.Environment): `twenty-questions` and
`troubleshooting`, one class each over the same rules (mapo.envs.questioning.game).

A scenario is one secret of a table (`<table>/<secret>`); at reset the environment draws the
pool, `pool_size` candidates holding the secret, from the scenario id, `pool_size` and the card's
`pool_seed` (cases.draw_pool), so every dialogue of a group plays the same secret and pool.
K = 1: state = (-D_t,), action = (D_{t-1} - D_t,), so IDR is each turn's gain. One guess: a wrong
guess loses, the right one wins, and the game times out after `max_turns` replies.

Five settings, each independent of the others (docs/games.md says why each exists):

- `pool_size` (8): candidates in play.
- `max_turns` (2 * ceil(log2(pool_size)) + 1): the replies the policy gets.
- `view` (`names`): what the policy reads. `names`: the opening lists the candidates and the
  questions, replies are "Yes." / "No."; `candidates`: each reply also lists the candidates still
  possible; `table`: the opening also lists what is true of each candidate and each reply re-lists
  the candidates still possible with theirs; `state`: the policy's context for each reply is the
  current state alone (`reply_context`: the candidates still possible with what is true of each,
  the questions not yet asked, the last answer), the transcript keeps the `table` messages.
- `show_turns_left` (false): the opening and each reply (or the state) say how many replies are left.
- `scoring` (`bits`): what the distance measures. `bits`: the information still missing,
  log2(n_t) + 1 while unsolved (game.py); `forfeit_losses`: the same, and a lost game returns the
  need to where it started, so its rewards sum to 0; `forfeit_unsolved`: a game that times out
  unsolved forfeits too; `chance`: the chance that even the best questioner fails from here
  (game.chance_distance), so a reply that wastes the budget costs on its own turn.

Names of older versions (`show_candidates`, `show_table`, `need`, `forfeit_on_failure`,
`forfeit_on_timeout`) are mapped by `upgrade_options`. Scenarios (`env.scenarios`, `mapo eval
--scenarios`): train | test | all of the bundled case set, or a case file `path.yaml` (all its
secrets) or `path.yaml:train|test`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from mapo.core.types import Scenario
from mapo.envs.base import Environment, StepResult
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

VIEWS = ("names", "candidates", "table", "state")
SCORINGS = ("bits", "forfeit_losses", "forfeit_unsolved", "chance")
TRANSCRIPT_KEYS = ("kind", "bits", "attribute", "guess", "reason", "candidates_left", "pool_size", "secret", "split",
                   "most_even")
NOT_ASKED = "not asked yet"  # the state view's line of questions left, as the reference players read it


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


def state_message(game: GameState, labels: tuple[str, ...], last_answer: str | None, replies_left: int | None) -> str:
    """The state view: the last answer, the candidates still possible with what is true of each, the
    questions not asked yet, and (when shown) the replies left."""
    table, left = game.table, game.consistent()
    lines = [table.intro] if table.intro else []
    if last_answer is not None:
        lines.append(f"Last answer: {last_answer}")
    lines.append(f"{labels[0]} still possible: {', '.join(left)}.")
    lines += [f"{labels[2]}:", *fact_lines(table, left)]
    lines.append(f"{labels[1]} {NOT_ASKED}: {' '.join(a.question for a in table.attributes if a.key not in game.answers)}")
    if replies_left is not None:
        lines.append(turns_left_note(replies_left))
    return "\n".join(lines)


def fact_lines(table: Table, candidates: list[str]) -> list[str]:
    """One line per candidate: its name and the labels of what is true of it ("-" for nothing)."""
    return [f"{name}: {', '.join(table.true_of(name)) or '-'}" for name in candidates]


def turns_left_note(replies: int) -> str:
    """How a game with `show_turns_left` states its budget (the reference players read it back)."""
    return f"{replies} {'reply' if replies == 1 else 'replies'} left."


def upgrade_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options of older versions as today's settings: `show_table` / `show_candidates` -> `view`,
    `need` and the two forfeits -> `scoring`; the retired `solve_bits`, `wrong_guesses_allowed` and
    `pool_seed` only at the values the game now fixes."""
    options = dict(options)
    show_table, show_candidates = options.pop("show_table", None), options.pop("show_candidates", None)
    if show_table is not None or show_candidates is not None:
        if "view" in options:
            raise ValueError("questioning game: give `view` alone, without show_table / show_candidates (its older names)")
        options["view"] = "table" if show_table else "candidates" if show_candidates else "names"
    need = options.pop("need", None)
    on_loss, on_timeout = options.pop("forfeit_on_failure", None), options.pop("forfeit_on_timeout", None)
    if need is not None or on_loss is not None or on_timeout is not None:
        if "scoring" in options:
            raise ValueError("questioning game: give `scoring` alone, without need / forfeit_on_* (its older names)")
        if on_timeout and not on_loss:
            raise ValueError("questioning game: forfeit_on_timeout without forfeit_on_failure is no longer a "
                             f"scoring; use scoring: one of {', '.join(SCORINGS)}")
        if need == "chance" and (on_loss or on_timeout):
            raise ValueError("questioning game: need: chance takes no forfeits; use scoring: chance")
        options["scoring"] = ("chance" if need == "chance" else "forfeit_unsolved" if on_timeout
                              else "forfeit_losses" if on_loss else need if need is not None else "bits")
    for retired, fixed in (("solve_bits", 1.0), ("wrong_guesses_allowed", 0), ("pool_seed", 0)):
        if retired in options and options.pop(retired) != fixed:
            raise ValueError(f"questioning game: {retired} is no longer a setting (the game fixes it at {fixed}"
                             + ("; a scenario's card may give pool_seed" if retired == "pool_seed" else "") + ")")
    return options


class QuestioningEnvironment(Environment):
    """One game: the policy asks, the table answers (see the module docstring)."""

    case_set: ClassVar[str] = "twenty-questions"
    labels: ClassVar[tuple[str, ...]] = ("Candidates", "Questions", "True of each (the rest is false)")
    system_prompt: ClassVar[str] = (
        "We play twenty questions. I secretly picked one of the candidates. Ask one listed yes/no "
        "question per reply. When you know it, reply Guess: <name>. You have one guess."
    )
    transcript_keys = TRANSCRIPT_KEYS
    reference_players = ("player:optimal", "player:informative", "player:random")
    reply_limits = {"max_new_tokens": 32, "max_sentences": 1}  # one short question or guess per reply
    dialogue_summary = staticmethod(game_summary)
    upgrade_options = staticmethod(upgrade_options)

    def __init__(self, pool_size: int = 8, max_turns: int | None = None, view: str = "names",
                 show_turns_left: bool = False, scoring: str = "bits") -> None:
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 2:
            raise ValueError(f"{self.case_set}: pool_size must be an integer >= 2, got {pool_size!r}")
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError(f"{self.case_set}: max_turns must be an integer >= 1 or null, got {max_turns!r}")
        if view not in VIEWS:
            raise ValueError(f"{self.case_set}: view must be one of {', '.join(VIEWS)}, got {view!r}")
        if not isinstance(show_turns_left, bool):
            raise ValueError(f"{self.case_set}: show_turns_left must be true or false, got {show_turns_left!r}")
        if scoring not in SCORINGS:
            raise ValueError(f"{self.case_set}: scoring must be one of {', '.join(SCORINGS)}, got {scoring!r}")
        self.pool_size = pool_size
        self.max_turns = max_turns or default_max_turns(pool_size)
        self.view = view
        self.show_turns_left = show_turns_left
        self.scoring = scoring
        # the endings whose rewards are taken back (the need returns to D_0)
        self.forfeited = {"forfeit_losses": {"failure"}, "forfeit_unsolved": {"failure", "timeout"}}.get(scoring, set())
        self.game: GameState | None = None
        self.last_answer: str | None = None

    # -- how scenarios load and how evaluation adapts the options (mapo.envs.base.Environment)

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
        from outside, except when the budget is shown: a cap below the game's limit then becomes it,
        so the replies left it states are the replies the policy gets."""
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
            pool = draw_pool(table, secret, self.pool_size, scenario.id, int(card.get("pool_seed", 0)))
        except CaseError as err:
            raise CaseError(f"{case_set.path}: {err}") from None
        self.game = GameState(table, secret, pool)
        self.turn = 0
        self.done_reason: str | None = None
        self.last_answer = None
        opening = opening_message(table, pool, self.labels, self.view in ("table", "state"))
        return f"{opening}\n{turns_left_note(self.max_turns)}" if self.show_turns_left else opening

    def reply_context(self) -> str | None:
        """Under `view: state`, the state the next reply is chosen in; otherwise the transcript."""
        if self.view != "state":
            return None
        if self.game is None:
            raise RuntimeError("call reset(scenario) first")
        replies_left = self.max_turns - self.turn if self.show_turns_left else None
        return state_message(self.game, self.labels, self.last_answer, replies_left)

    def step(self, response: str) -> StepResult:
        if self.game is None:
            raise RuntimeError("call reset(scenario) before step()")
        if self.done_reason is not None:
            raise RuntimeError(f"the game has ended ({self.done_reason}); call reset() to start another")
        if not isinstance(response, str):
            raise TypeError(f"response must be a string, got {type(response).__name__}")
        before = self._distance()
        state_key = self._state_key()
        move = parse_reply(response, self.game.table)
        split, most_even = self._question_quality(move.attribute if move.kind == "question" else None)
        outcome = self.game.play(move)
        self.turn += 1
        if self.game.solved:
            self.done_reason = "success"
        elif self.game.wrong_guesses:
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
            "state_key": state_key,
            "split": split,
            "most_even": most_even,
            "done_reason": self.done_reason,
        }
        self.last_answer = outcome.reply
        reply = outcome.reply
        if self.view in ("table", "state") and self.done_reason is None:
            reply += "\n".join([" Still possible:", *fact_lines(self.game.table, self.game.consistent())])
        elif self.view == "candidates" and self.done_reason is None:
            reply += f" Still possible: {', '.join(self.game.consistent())}."
        if self.show_turns_left and self.done_reason is None:  # on a line of its own below a table
            reply += ("\n" if self.view in ("table", "state") else " ") + turns_left_note(self.max_turns - self.turn)
        return StepResult(reply, (before - distance,), self.done_reason is not None, info)

    def _question_quality(self, attribute: str | None) -> tuple[bool | None, bool | None]:
        """(whether asking `attribute` splits the candidates still possible, whether it splits them and
        no question not asked yet splits them more evenly); None for a reply that asks no question."""
        assert self.game is not None
        if attribute is None:
            return None, None
        table, left = self.game.table, self.game.consistent()

        def imbalance(key: str) -> int:
            return abs(2 * sum(table.answer(c, key) for c in left) - len(left))

        unasked = [a.key for a in table.attributes if a.key not in self.game.answers]
        if attribute not in unasked:  # a re-asked question teaches nothing
            return False, False
        split = imbalance(attribute) < len(left)  # with one candidate left no question splits, none is most even
        return split, split and imbalance(attribute) == min(map(imbalance, unasked))

    def _state_key(self) -> str:
        """The exact state a reply is chosen in: candidates left, questions asked, replies left."""
        assert self.game is not None
        return "|".join((",".join(sorted(self.game.consistent())), ",".join(sorted(self.game.answers)),
                         str(self.max_turns - self.turn)))

    def _distance(self) -> float:
        """The need left now (the module docstring's `scoring`)."""
        assert self.game is not None
        if self.scoring != "chance":
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
        if self.scoring == "chance":
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
