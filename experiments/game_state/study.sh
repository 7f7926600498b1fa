#!/usr/bin/env bash
# The state-view study, a share at a time, by one command:
#   bash experiments/game_state/study.sh PLAN SEEDS VARIANT... (PLAN: tight | long; SEEDS: 1 or 1,2)
#   e.g. bash experiments/game_state/study.sh tight 0 mapo_state-idr-lr2e-4 grpo-idr-lr2e-4
#   (units run seed by seed, in the order the variants are given)
# 1. The weak warm start, the committed one put in runs/game-state-warm and evaluated (build_warm_start.sh,
#    2 minutes).
# 2. `mapo ablate` on those units of the plan (experiments/game_state/plan.py), JOBS side by side (default
#    2: a core each), each to its plateau, each chunk of 10 steps in a fresh process; a rerun resumes a
#    cut one from its last checkpoint. Two side by side beat one on both cores: the update is 1.5-1.8x
#    faster on two cores (39-43 s against 56-74 s on this AMD EPYC, 2026-12-03/04), the rollout not at
#    all (15-19 s either way). A second share in the same session takes another RUN and the other core:
#    `RUN=runs/game-state-tight-s1 JOBS=1 taskset -c 1 bash experiments/game_state/study.sh ...`.
#    On an Intel Xeon with AMX (2026-12-04) it is the other way: one unit on both cores (JOBS=1) took 26-32 s
#    a step against 50-57 s on one (update 17-22 s against 33-41 s, rollout 9 s against 15-19 s), so there
#    one unit at a time finishes twice as soon for the same throughput. Before 2026-12-03
#    two side by side cost 140 s a step each: each unit's vLLM engine bound its threads to the first
#    cores its process could use, so both ran on core 0; now each runs on cores of its own
#    (mapo.lab.ablate.runner.core_sets).
# 3. Whenever a unit finishes, the finished units are exported without their weights into
#    docs/study/game-state-PLAN (a share of the study: later sessions add theirs) and, with COMMIT=1,
#    committed, so a session that ends mid-study keeps every finished unit.
# 4. A unit cut by the end of a session resumes from runs/ when the next session gets the same machine
#    back (it usually does: docs/results.md, 2026-12-04); on a new machine it reruns from step 0. Its
#    checkpoint (adapter and optimizer, 16 MB even packed) has no room in the tracked tree (tests/test_tree_size.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
PLAN=$1
SEEDS=()
for s in ${2//,/ }; do SEEDS+=(--seed "$s"); done
shift 2
RUN=${RUN:-runs/game-state-$PLAN}  # another folder for another share in the same session
EXPORT=docs/study/game-state-$PLAN
JOBS=${JOBS:-2}
bash experiments/game_state/build_warm_start.sh runs/game-state-warm
VARIANTS=()
for v in "$@"; do VARIANTS+=(--variant "$v"); done

export_finished() {
    [ -f "$RUN/plan.json" ] || return 0
    mapo ablate --resume "$RUN" --export "$EXPORT" >/dev/null 2>&1 || return 0
    mapo ablate --resume "$EXPORT" --report >/dev/null 2>&1 || true
    if [ "${COMMIT:-0}" = 1 ] && [ -n "$(git status --porcelain -- "$EXPORT")" ]; then
        git add "$EXPORT" && git commit -q -m "docs/study/game-state-$PLAN: finished units exported ($(date -u +%H:%M))" -- "$EXPORT"
    fi
}
finished() { (ls "$RUN"/evals/*/eval.json 2>/dev/null || true) | sort | tr '\n' ' '; }  # none yet: no failure

stopping=0
trap 'stopping=1; kill -TERM "$ABLATE" 2>/dev/null' TERM INT
# A unit killed from outside (out of memory: a run on vLLM still grows by a few hundred MB a step,
# docs/results.md 2026-12-02) stops the ablation with its checkpoints kept: resume, up to 20 times.
for attempt in $(seq 20); do
    if [ -f "$RUN/plan.json" ]; then
        mapo ablate --resume "$RUN" --jobs "$JOBS" &
    else
        mapo ablate --plan "experiments.game_state.plan:state_${PLAN}_plan" "${SEEDS[@]}" "${VARIANTS[@]}" --jobs "$JOBS" \
            --output "$RUN" &
    fi
    ABLATE=$!
    seen=$(finished)
    while kill -0 "$ABLATE" 2>/dev/null; do
        sleep 60 || true  # a TERM to the process group ends the sleep too: wait on for the checkpoints
        now=$(finished)
        if [ "$now" != "$seen" ]; then export_finished; seen=$now; fi
    done
    if wait "$ABLATE"; then break; fi
    [ "$stopping" = 1 ] && break
    echo "the ablation stopped (attempt $attempt); resuming from the checkpoints" >&2
    sleep 10
done
export_finished
