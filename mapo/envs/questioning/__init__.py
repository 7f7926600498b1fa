"""The questioning game: a built-in environment whose reward is exact (no judge).

The simulated user holds a secret from a small pool; the policy asks yes/no questions
answered from a table, then guesses. D_t = log2 of the candidates still consistent
(plus one bit until the right guess), so IDR pays the information each turn gained.

    table.py    one table: candidates, attributes, what is true of each
    cases.py    case sets (YAML), their checks, scenarios and pools
    parse.py    the exact mapping from a reply to a question, a guess or an invalid turn
    game.py     one game's state and rules
    env.py      the environments `twenty-questions` and `troubleshooting`
    players.py  reference players (`--model player:optimal`, `player:informative`, `player:random`)
    metrics.py  success, turns, bits per question, invalid and repeated questions, wrong guesses

A player's games as supervised (SFT) dialogues: mapo.sft.demos (`mapo env demos`).

docs/games.md describes the game, its rules and the measured reference figures.
"""
