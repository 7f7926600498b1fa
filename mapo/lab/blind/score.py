"""`mapo compare --score-blind PAIRS KEY RATINGS`: a rater's blind preferences, unblinded with the key.

Checks first, and refuses with the reason: PAIRS is the file the key was written for (its
SHA-256), the ratings were made on it (the template's `pairs_sha256` line), every pair is rated
exactly once with A, B or tie and any score is an integer 1-5. Then, per run: how often the
rater preferred it among the decisive pairs (ties reported apart) with the exact binomial
(Clopper-Pearson) 95 % interval; the same per card; the mean 1-5 scores; how often side A was
preferred (a position-bias check); and how often the judge's EPM-Q (whole dialogue, from the
eval folders via the key) ordered a decisive pair the way the rater did.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapo.intervals import clopper_pearson
from mapo.lab.blind.pairs import KEY_FORMAT, RATINGS_HEADER, SHA_LINE, SIDES, sha256_of
from mapo.validation import read_records
from mapo.validation import read_text

CHOICES = {"a": "A", "b": "B", "tie": "tie"}


class RatingsError(ValueError):
    """Pairs, key and ratings that do not belong together, or a ratings row that cannot be read."""


@dataclass
class Rating:
    pair: str
    preferred: str  # "A" | "B" | "tie"
    scores: dict[str, int | None]  # side -> 1-5 or None


def read_key(path: Path) -> dict[str, Any]:
    try:
        key = json.loads(read_text(path, "blind-comparison key", RatingsError))
    except json.JSONDecodeError as err:
        raise RatingsError(f"{path}: not valid JSON ({err.msg})") from None
    if not isinstance(key, dict) or key.get("format") != KEY_FORMAT:
        raise RatingsError(f"{path}: not a blind-comparison key (format {KEY_FORMAT!r} expected)")
    return key


def check_pairs(pairs_path: Path, key: dict[str, Any], key_path: Path) -> list[dict[str, Any]]:
    """The pairs, once their file is the one the key was written for and their ids are the key's."""
    digest = sha256_of(pairs_path)
    if digest != key.get("pairs_sha256"):
        raise RatingsError(f"{pairs_path} has changed since {key_path} was written (SHA-256 {digest[:12]}…, "
                           f"the key expects {str(key.get('pairs_sha256'))[:12]}…): these are not the pairs that were rated")
    pairs = read_records(pairs_path, "blind pairs", RatingsError)
    ids = [p.get("pair") for p in pairs]
    if sorted(map(str, ids)) != sorted(key["pairs"]):
        raise RatingsError(f"{pairs_path}: its pair ids do not match {key_path}")
    return pairs


def _score(value: str, where: str, field: str) -> int | None:
    if not value.strip():
        return None
    try:
        score = int(value)
    except ValueError:
        raise RatingsError(f"{where}: {field} must be an integer 1-5 or empty, got {value!r}") from None
    if not 1 <= score <= 5:
        raise RatingsError(f"{where}: {field} must be 1-5, got {score}")
    return score


def read_ratings(path: Path, pairs_sha256: str, pair_ids: list[str]) -> list[Rating]:
    """The ratings file (the template filled in), checked against the pairs it must rate."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet may add a byte-order mark
    except UnicodeDecodeError as err:
        raise RatingsError(f"{path}: not UTF-8 text ({err.reason})") from None
    lines = text.splitlines()
    shas = [line[len(SHA_LINE):].strip() for line in lines if line.startswith(SHA_LINE)]
    if not shas:
        raise RatingsError(f"{path}: no '{SHA_LINE.strip()}' line; fill in the ratings.csv written with the pairs")
    if shas[0] != pairs_sha256:
        raise RatingsError(f"{path}: made for other pairs (pairs_sha256 {shas[0][:12]}…, these pairs are "
                           f"{pairs_sha256[:12]}…)")
    body = [(number, line) for number, line in enumerate(lines, 1) if not line.startswith("#")]
    if not body:
        raise RatingsError(f"{path}: no header row ({','.join(RATINGS_HEADER)})")
    rows = list(csv.reader(io.StringIO("\n".join(line for _, line in body))))
    header = [h.strip() for h in rows[0]]
    missing_columns = [c for c in RATINGS_HEADER[:2] if c not in header]
    unknown_columns = [c for c in header if c not in RATINGS_HEADER]
    if missing_columns or unknown_columns:
        raise RatingsError(f"{path}:{body[0][0]}: header must be {','.join(RATINGS_HEADER)} "
                           f"(missing {missing_columns or 'none'}, unknown {unknown_columns or 'none'})")
    known = set(pair_ids)
    ratings: dict[str, Rating] = {}
    for (number, _), row in zip(body[1:], rows[1:]):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{path}:{number}"
        if len(row) > len(header):
            raise RatingsError(f"{where}: {len(row)} fields for {len(header)} columns (a comma in a note needs quotes)")
        cells = dict(zip(header, (cell.strip() for cell in row)))
        pair = cells.get("pair", "")
        if pair not in known:
            raise RatingsError(f"{where}: pair {pair!r} is not in the pairs file")
        if pair in ratings:
            raise RatingsError(f"{where}: pair {pair} is rated twice")
        choice = CHOICES.get(cells.get("preferred", "").lower())
        if choice is None:
            raise RatingsError(f"{where}: preferred must be A, B or tie, got {cells.get('preferred', '')!r}")
        scores = {side: _score(cells.get(f"score_{side}", ""), where, f"score_{side}") for side in SIDES}
        ratings[pair] = Rating(pair, choice, scores)
    unrated = [p for p in pair_ids if p not in ratings]
    if unrated:
        raise RatingsError(f"{path}: {len(unrated)} of {len(pair_ids)} pairs not rated: {', '.join(unrated[:10])}"
                           + (" …" if len(unrated) > 10 else ""))
    return [ratings[p] for p in pair_ids]


def win_share(wins: int, decisive: int) -> dict[str, Any]:
    """`wins` of `decisive` pairs as a rate with its exact binomial (Clopper-Pearson) 95 % interval."""
    low, high = clopper_pearson(wins, decisive)
    return {"wins": wins, "decisive": decisive, "rate": wins / decisive if decisive else None, "low": low, "high": high}


def score(key: dict[str, Any], pairs: list[dict[str, Any]], ratings: list[Rating]) -> dict[str, Any]:
    """Win rates with intervals, per card, mean scores, side-A share and the EPM-Q agreement."""
    labels = [run["label"] for run in key["runs"]]
    winners = []  # per rating: the preferred run's label, or None for a tie
    for rating in ratings:
        winners.append(None if rating.preferred == "tie" else key["pairs"][rating.pair][rating.preferred])
    decisive = sum(w is not None for w in winners)
    wins = Counter(w for w in winners if w is not None)
    cards: dict[str, dict[str, Any]] = {}
    titles = {p["pair"]: p.get("title") or p["scenario_id"] for p in pairs}
    for rating, winner in zip(ratings, winners):
        entry = key["pairs"][rating.pair]
        card = cards.setdefault(entry["scenario_id"], {"title": titles[rating.pair], "pairs": 0, "tie": 0,
                                                       **{label: 0 for label in labels}})
        card["pairs"] += 1
        card[winner if winner is not None else "tie"] += 1
    scores = {label: [] for label in labels}
    for rating in ratings:
        for side in SIDES:
            if rating.scores[side] is not None:
                scores[key["pairs"][rating.pair][side]].append(rating.scores[side])
    return {
        "runs": labels,
        "pairs": len(ratings),
        "ties": len(ratings) - decisive,
        "win": {label: win_share(wins[label], decisive) for label in labels},
        "side_A": win_share(sum(r.preferred == "A" for r in ratings), decisive),
        "scores": {label: {"n": len(v), "mean": sum(v) / len(v) if v else None} for label, v in scores.items()},
        "cards": cards,
        "epmq_agreement": epmq_agreement(key, ratings),
    }


def epmq_agreement(key: dict[str, Any], ratings: list[Rating]) -> dict[str, Any]:
    """Among decisive pairs, how often the side with the higher EPM-Q is the one the rater preferred.
    Pairs with equal or missing EPM-Q are counted apart; an invalid evaluation gives no agreement."""
    invalid = [run for run in key["runs"] if not run["verdict"]["valid"]]
    if invalid:
        return {"computed": False, "reason": "; ".join(f"{r['label']}'s evaluation is invalid: {r['verdict']['reason']}"
                                                       for r in invalid)}
    agree = compared = equal = missing = 0
    for rating in ratings:
        if rating.preferred == "tie":
            continue
        epmq = key["pairs"][rating.pair]["epmq"]
        if epmq["A"] is None or epmq["B"] is None:
            missing += 1
        elif epmq["A"] == epmq["B"]:
            equal += 1
        else:
            compared += 1
            judge_pick = "A" if epmq["A"] > epmq["B"] else "B"
            agree += judge_pick == rating.preferred
    return {"computed": True, **win_share(agree, compared), "equal_epmq": equal, "missing_epmq": missing}


def _pct(share: dict[str, Any]) -> str:
    if not share["decisive"]:
        return "n/a (no decisive pair)"
    return (f"{share['wins']} of {share['decisive']} ({100 * share['rate']:.1f} %, 95 % interval "
            f"{100 * share['low']:.1f}-{100 * share['high']:.1f} %)")


def report_text(result: dict[str, Any], key: dict[str, Any]) -> str:
    """The result as Markdown (what the console prints and score.md holds)."""
    labels = result["runs"]
    shown = f"first {key['turns']} turns" if key.get("turns") else "all turns both dialogues have"
    lines = [f"# Blind pairwise rating: {labels[0]} vs {labels[1]}", "",
             f"{result['pairs']} pairs ({shown}); order seed {key['seed']}; "
             "intervals: exact binomial (Clopper-Pearson) over the decisive pairs.", ""]
    for label in labels:
        lines.append(f"- {label} preferred in {_pct(result['win'][label])}")
    lines.append(f"- ties: {result['ties']} of {result['pairs']}")
    lines.append(f"- side A preferred in {_pct(result['side_A'])} (position-bias check: near 50 % expected)")
    for label in labels:
        s = result["scores"][label]
        if s["n"]:
            lines.append(f"- {label}: mean score {s['mean']:.2f} of 5 over {s['n']} dialogue(s)")
    agreement = result["epmq_agreement"]
    if not agreement["computed"]:
        lines.append(f"- EPM-Q agreement not computed: {agreement['reason']}")
    else:
        left_out = f"{agreement['equal_epmq']} with equal EPM-Q, {agreement['missing_epmq']} without one"
        if agreement["decisive"]:
            lines.append(f"- the judge's EPM-Q (whole dialogues) ordered {_pct(agreement)} decisive pairs as the rater "
                         f"did; left out: {left_out}")
        else:
            lines.append(f"- EPM-Q agreement: no decisive pair whose two dialogues EPM-Q tells apart ({left_out})")
    lines += ["", "| card | pairs | " + " | ".join(labels) + " | tie |", "|---|---:|" + "---:|" * (len(labels) + 1)]
    for card in result["cards"].values():
        lines.append(f"| {card['title']} | {card['pairs']} | " + " | ".join(str(card[label]) for label in labels)
                     + f" | {card['tie']} |")
    return "\n".join(lines) + "\n"


def score_blind(pairs_path: str | Path, key_path: str | Path, ratings_path: str | Path,
                out_dir: str | Path) -> tuple[Path, str]:
    """Check, score, and write score.json and score.md into `out_dir`; returns (score.md, its text)."""
    pairs_path, key_path, ratings_path = Path(pairs_path), Path(key_path), Path(ratings_path)
    for path in (pairs_path, key_path, ratings_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    key = read_key(key_path)
    pairs = check_pairs(pairs_path, key, key_path)
    ratings = read_ratings(ratings_path, key["pairs_sha256"], [p["pair"] for p in pairs])
    result = score(key, pairs, ratings)
    text = report_text(result, key)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "score.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "score.md").write_text(text, encoding="utf-8")
    return out / "score.md", text
