"""`mapo compare --blind A B`: pairs of transcripts for a rater who must not know which run wrote which.

For every dialogue both `mapo eval` folders hold (same scenario card, same sample index, and
both evaluations run with the same seed) one pair: the first k turns of each (both cut to the
same length, so a longer dialogue does not give its run away), the two put in the order A/B
drawn at random per pair from a recorded seed. Written:

- `rater/pairs.md`: every pair in full, for a person to read;
- `rater/pairs.jsonl`: the same pairs, one JSON object a line (what the score checks against);
- `rater/ratings.csv`: the template to fill in (A, B or tie; optional 1-5 scores);
- `key.json`: which run is A and which B in each pair, the seed, each side's EPM-Q and each
  run's fallback verdict, and the SHA-256 of pairs.jsonl. It stays outside `rater/`: hand the
  rater only that folder.

`mapo.lab.blind.score` reads the ratings back with the key.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapo.evaluate.bench import write_jsonl
from mapo.evaluate.compare import read_result
from mapo.evaluate.validity import verdict_of
from mapo.validation import compressed_or_plain, read_records

PAIRS_FORMAT = "mapo-blind-pairs/1"
KEY_FORMAT = "mapo-blind-key/1"
SIDES = ("A", "B")
RATINGS_HEADER = ("pair", "preferred", "score_A", "score_B", "note")
SHA_LINE = "# pairs_sha256: "


@dataclass
class EvalRun:
    """One `mapo eval` folder: its label, config, per-dialogue transcripts and EPM-Q, fallback verdict."""

    label: str
    path: Path
    config: dict[str, Any]
    transcripts: dict[tuple[str, int], dict[str, Any]]  # (scenario_id, sample_index) -> transcript record
    epmq: dict[tuple[str, int], float | None]
    verdict: dict[str, Any]


def load_eval_run(folder: str | Path, label: str | None = None) -> EvalRun:
    """A `mapo eval` output folder (or its eval.json): eval.json and transcripts.jsonl beside it."""
    file, data = read_result(folder)
    if not isinstance(data, dict) or data.get("benchmark", "eval") != "eval" or "summary" not in data:
        raise ValueError(f"{file}: not a mapo eval result (a blind comparison needs `mapo eval` folders)")
    transcripts_path = compressed_or_plain(file.parent, "transcripts.jsonl")
    if not transcripts_path.is_file():
        raise FileNotFoundError(f"{transcripts_path}: no transcripts beside {file.name}; a blind comparison reads them")
    transcripts = {}
    for number, record in enumerate(read_records(transcripts_path, "transcripts"), 1):
        try:
            key = (str(record["scenario_id"]), int(record["sample_index"]))
            turns = record["turns"]
            if not all(isinstance(t, dict) and isinstance(t.get("user"), str) and isinstance(t.get("response"), str)
                       for t in turns):
                raise TypeError("turns: each turn needs text fields user and response")
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{transcripts_path}: record {number}: {err}") from None
        transcripts[key] = record
    epmq = {}
    try:
        for scenario in data.get("scenarios", []):
            for sample in scenario.get("samples", []):
                score = sample.get("epmq")
                epmq[(str(scenario["scenario_id"]), int(sample["sample_index"]))] = score["epmq"] if score else None
        verdict = verdict_of(data["summary"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{file}: eval result is missing or has a bad {err}") from None
    return EvalRun(label or file.parent.name, file.parent, data.get("config", {}), transcripts, epmq, verdict)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _messages(record: dict[str, Any], turns: int) -> list[dict[str, str]]:
    out = []
    for turn in record["turns"][:turns]:
        out.append({"speaker": "person", "text": turn["user"]})
        out.append({"speaker": "listener", "text": turn["response"]})
    return out


def build_pairs(first: EvalRun, second: EvalRun, turns: int | None, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(pairs, key): one pair per dialogue both runs hold, in the first run's order."""
    if first.label == second.label:
        raise ValueError(f"both runs are labelled {first.label!r}; give --label twice to tell them apart")
    if turns is not None and turns < 1:
        raise ValueError(f"--turns must be >= 1, got {turns}")
    seeds = (first.config.get("seed"), second.config.get("seed"))
    if seeds[0] != seeds[1]:
        raise ValueError(f"the evaluations used different seeds ({first.label}: {seeds[0]}, {second.label}: {seeds[1]}): "
                         "their dialogues do not pair; evaluate both with the same --seed")
    common = [key for key in first.transcripts if key in second.transcripts]
    if not common:
        raise ValueError(f"{first.path} and {second.path} share no dialogue (scenario id and sample index)")
    rng = random.Random(seed)
    width = len(str(len(common)))
    pairs, key_pairs = [], {}
    for number, (scenario_id, sample) in enumerate(common, 1):
        records = (first.transcripts[(scenario_id, sample)], second.transcripts[(scenario_id, sample)])
        shown = min(len(records[0]["turns"]), len(records[1]["turns"]), turns or 10**9)
        runs = (first, second) if rng.random() < 0.5 else (second, first)
        by_side = dict(zip(SIDES, runs))
        pair_id = f"p{number:0{width}d}"
        pairs.append({
            "pair": pair_id, "scenario_id": scenario_id, "title": records[0].get("title", ""), "sample_index": sample,
            "turns_shown": shown,
            **{side: _messages(run.transcripts[(scenario_id, sample)], shown) for side, run in by_side.items()},
        })
        key_pairs[pair_id] = {
            "scenario_id": scenario_id, "sample_index": sample,
            **{side: run.label for side, run in by_side.items()},
            "epmq": {side: run.epmq.get((scenario_id, sample)) for side, run in by_side.items()},
        }
    key = {
        "format": KEY_FORMAT, "seed": seed, "turns": turns,
        "runs": [{"label": run.label, "path": str(run.path), "eval_seed": run.config.get("seed"),
                  "policy": run.config.get("policy"), "verdict": run.verdict} for run in (first, second)],
        "pairs": key_pairs,
    }
    return pairs, key


def pairs_markdown(pairs: list[dict[str, Any]]) -> str:
    """Every pair in full, for the rater."""
    lines = [
        "# Blind pairwise rating",
        "",
        "Each pair shows two listeners talking with the same person (the same scenario), cut to the",
        "same number of turns. Read both in full, then write in ratings.csv which listener helped the",
        "person more (A, B or tie), and if you like a score for each from 1 (no help) to 5 (excellent",
        "help). Judge substance: understanding of the situation, accurate naming of the feeling, help",
        "towards the person's own next step. Nothing here says which system wrote which side.",
        "",
    ]
    for pair in pairs:
        title = f" · {pair['title']}" if pair.get("title") else ""
        lines += [f"## Pair {pair['pair']}{title} · first {pair['turns_shown']} turn(s)", ""]
        for side in SIDES:
            lines += [f"### {side}", ""]
            for message in pair[side]:
                speaker = "Person" if message["speaker"] == "person" else f"Listener {side}"
                lines += [f"**{speaker}:** {message['text']}", ""]
        lines += ["---", ""]
    return "\n".join(lines)


def ratings_template(pairs: list[dict[str, Any]], pairs_sha256: str) -> str:
    head = [
        "# mapo blind ratings: one row per pair of pairs.md. Keep these comment lines.",
        f"{SHA_LINE}{pairs_sha256}",
        "# preferred: A, B or tie. score_A, score_B: optional, 1 (no help) to 5 (excellent help). note: optional.",
        ",".join(RATINGS_HEADER),
    ]
    return "\n".join(head + [f"{pair['pair']},,,," for pair in pairs]) + "\n"


def write_blind(paths: tuple[str | Path, str | Path], out_dir: str | Path, labels: list[str] | None = None,
                turns: int | None = None, seed: int | None = None) -> tuple[Path, Path, int]:
    """Write rater/pairs.md, rater/pairs.jsonl, rater/ratings.csv and key.json into `out_dir`;
    returns (rater folder, key path, number of pairs). Without `seed` a fresh one is drawn (and
    recorded in the key), so nobody can rebuild the order from the eval folders."""
    if labels and len(labels) != 2:
        raise ValueError(f"{len(labels)} labels for 2 runs; give one label per run or none")
    first, second = (load_eval_run(p, labels[i] if labels else None) for i, p in enumerate(paths))
    if first.label == second.label and not labels:  # two folders with the same name
        second.label = f"{second.label} (2)"
    seed = secrets.randbits(32) if seed is None else seed
    pairs, key = build_pairs(first, second, turns, seed)
    out = Path(out_dir)
    rater = out / "rater"
    rater.mkdir(parents=True, exist_ok=True)
    pairs_path = rater / "pairs.jsonl"
    write_jsonl(pairs_path, [{"format": PAIRS_FORMAT, **p} for p in pairs])
    (rater / "pairs.md").write_text(pairs_markdown(pairs), encoding="utf-8")
    digest = sha256_of(pairs_path)
    (rater / "ratings.csv").write_text(ratings_template(pairs, digest), encoding="utf-8")
    key_path = out / "key.json"
    key_path.write_text(json.dumps({**key, "pairs_sha256": digest}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return rater, key_path, len(pairs)
