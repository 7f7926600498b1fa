"""Issue 59's two measures on dialogues already kept (docs/results.md, sixteenth session). Usage:

    python experiments/empathy_warm/repeats_and_agreement.py reask docs/blind/empathy-warm-s* [--out FILE]
    python experiments/empathy_warm/repeats_and_agreement.py agreement docs/blind/empathy-warm-s* \
        [--full docs/blind/empathy-warm-s3:mapo=docs/study/empathy-warm-rebuilt/evals/mapo-idr-s3 ...] [--out FILE]
    python experiments/empathy_warm/repeats_and_agreement.py paid docs/study/empathy-again/evals/*-s[01] [--out FILE]

`reask`: per set and run, the share of listener replies that re-ask a question already asked
in the dialogue, by meaning (the offline judge's repeats.py) and by prefix (the monitor's
`reasked_question`), and the share with any repeated move (`mapo.lab.blind.reask`). A set is a
blind set's folder (each side under its run label, as the rater read it) or a `mapo eval` /
training run's transcripts (a folder or the file). Then, for two runs of each blind set
(--versus, MAPO and GRPO by default), the difference by set.

`agreement`: each blind set's pairs scored again by today's offline judge, the person's lines
kept as written (`mapo.lab.blind.rescore`), and how often EPM-Q then orders a decisive pair as the
reader did, beside the figure the key records; per set and pooled; then each run's mean EPM-Q
both ways, the first --versus run minus the second by set. --full SET:LABEL=TRANSCRIPTS
replays that run's dialogues in full (as its evaluation scored them) instead of as the rater read them.

`paid`: where the judge's progress went in an evaluation (a `mapo eval` folder, an exported one, or its transcripts):
re-asked questions, other repeated moves and fresh replies, each class's progress a reply and share
of all the progress paid (a repeat is refused progress on its own axis, not on the others).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _pct(share: dict[str, Any]) -> str:
    if not share.get("computed", True) or not share["decisive"]:
        return "n/a"
    return f"{share['wins']}/{share['decisive']} ({100 * share['rate']:.1f} %, {100 * share['low']:.1f}-{100 * share['high']:.1f})"


def reask(paths: list[Path], versus: list[str]) -> dict[str, Any]:
    from mapo.lab.blind.dialogue_sets import dialogue_sets
    from mapo.lab.blind.reask import repeat_rates

    sets = {str(path): {label: repeat_rates(d) for label, d in dialogue_sets(path).items()} for path in paths}
    print("| set | run | replies | re-asked by meaning | by prefix | by meaning only | any repeated move |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, runs in sets.items():
        for label, r in runs.items():
            print(f"| {name} | {label} | {r['replies']} | {100 * r['reask_meaning']:.1f} % | {100 * r['reask_prefix']:.1f} % "
                  f"| {100 * r['reask_meaning_only']:.1f} % | {100 * r['any_repeat']:.1f} % |")
    first, second = versus
    paired = {name: runs for name, runs in sets.items() if first in runs and second in runs}
    by_seed: dict[str, Any] = {}
    for measure in ("reask_meaning", "reask_prefix", "any_repeat"):
        diffs = {name: runs[first][measure] - runs[second][measure] for name, runs in paired.items()}
        by_seed[measure] = {"difference": diffs, f"{first}_not_higher": sum(d <= 0 for d in diffs.values()), "sets": len(diffs)}
        if diffs:
            print(f"{measure}: {first} − {second} by set " + ", ".join(f"{100 * d:+.1f}" for d in diffs.values())
                  + f" points; {first} no higher in {by_seed[measure][f'{first}_not_higher']} of {len(diffs)}")
    return {"sets": sets, "versus": versus, "by_set": by_seed}


def agreement(paths: list[Path], full: list[str], versus: list[str]) -> dict[str, Any]:
    from mapo.intervals import t_interval
    from mapo.lab.blind.rescore import pooled, rescore_set

    given: dict[str, dict[str, Path]] = {}
    for spec in full:
        try:
            folder, rest = spec.rsplit(":", 1)
            label, transcripts = rest.split("=", 1)
        except ValueError:
            raise SystemExit(f"--full {spec!r}: expected SET:LABEL=TRANSCRIPTS") from None
        given.setdefault(str(Path(folder)), {})[label] = Path(transcripts)
    results = [rescore_set(path, given.get(str(path))) for path in paths]
    print("| set | dialogues | recorded | rescored | mean EPM-Q recorded → rescored | ended early |")
    print("|---|---|---:|---:|---|---:|")
    for r in results:
        means = ", ".join(f"{label} {m['recorded']:.1f} → {m['rescored']:.1f}" for label, m in r["mean_epmq"].items())
        print(f"| {r['set']} | {r['dialogues']} | {_pct(r['recorded'])} | {_pct(r['rescored'])} | {means} | {r['ended_early']} |")
    pool = {which: pooled(results, which) for which in ("recorded", "rescored")}
    print(f"pooled: recorded {_pct(pool['recorded'])}, rescored {_pct(pool['rescored'])}")
    first, second = versus
    paired = [r["mean_epmq"] for r in results if first in r["mean_epmq"] and second in r["mean_epmq"]]
    by_set = {}
    for which in ("recorded", "rescored"):
        t = by_set[which] = t_interval([m[first][which] - m[second][which] for m in paired])
        interval = f"; t interval {t['mean']:+.1f} [{t['low']:+.1f}, {t['high']:+.1f}]" if t["low"] is not None else ""
        print(f"mean EPM-Q {which}: {first} − {second} by set " + ", ".join(f"{d:+.1f}" for d in t["values"]) + interval)
    return {"sets": results, "pooled": pool, "versus": versus, "epmq_by_set": by_set}


def paid(paths: list[Path]) -> dict[str, Any]:
    """Where the judge's progress went, per evaluation (its transcripts keep each turn's levels): replies
    that re-ask a question (by meaning), replies with another repeated move, and fresh replies; per class
    the replies, the mean progress and penalty a reply (levels summed over the three axes), the share paid
    any progress, and the class's share of all progress paid."""
    from mapo.lab.blind.reask import reply_repeats
    from mapo.validation import compressed_or_plain, text_of

    result: dict[str, Any] = {}
    print("| evaluation | class | replies | progress a reply | penalty a reply | paid any progress | share of all progress |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path in paths:
        file = compressed_or_plain(path, "transcripts.jsonl") if path.is_dir() else path
        classes = {name: {"replies": 0, "progress": 0, "penalty": 0, "paid": 0} for name in ("re-asked", "other repeat", "fresh")}
        for line in text_of(file).splitlines():
            turns = json.loads(line)["turns"]
            replies = [turn["response"] for turn in turns]
            for n, turn in enumerate(turns):
                found = reply_repeats(turn["response"], replies[:n])
                c = classes["re-asked" if found.by_meaning else "other repeat" if found.kinds else "fresh"]
                progress = sum(v for k, v in turn["levels"].items() if k.endswith("_prog"))
                c["replies"] += 1
                c["progress"] += progress
                c["penalty"] += sum(v for k, v in turn["levels"].items() if k.endswith("_neg"))
                c["paid"] += progress > 0
        total = sum(c["progress"] for c in classes.values()) or 1
        for name, c in classes.items():
            n = c["replies"] or 1
            c.update(progress_a_reply=c["progress"] / n, penalty_a_reply=c["penalty"] / n, paid_share=c["paid"] / n,
                     share_of_progress=c["progress"] / total)
            print(f"| {path} | {name} | {c['replies']} | {c['progress_a_reply']:.2f} | {c['penalty_a_reply']:.2f} "
                  f"| {100 * c['paid_share']:.0f} % | {100 * c['share_of_progress']:.0f} % |")
        result[str(path)] = classes
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measure", choices=("reask", "agreement", "paid"))
    parser.add_argument("sets", nargs="+", type=Path)
    parser.add_argument("--versus", nargs=2, default=["mapo", "grpo"], metavar=("RUN", "AGAINST"))
    parser.add_argument("--full", action="append", default=[], metavar="SET:LABEL=TRANSCRIPTS")
    parser.add_argument("--out", type=Path, help="Also write the figures to this JSON file.")
    args = parser.parse_args()
    if args.measure == "reask":
        result = reask(args.sets, args.versus)
    elif args.measure == "agreement":
        result = agreement(args.sets, args.full, args.versus)
    else:
        result = paid(args.sets)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"Figures: {args.out}")


if __name__ == "__main__":
    main()
