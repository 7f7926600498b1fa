#!/usr/bin/env bash
# The state-view study, a share at a time, by one command:
#   bash experiments/game_state/study.sh PLAN SEED VARIANT... (PLAN: tight | long)
#   e.g. bash experiments/game_state/study.sh tight 0 mapo_state-idr-lr2e-4 grpo-idr-lr2e-4
# 1. The weak warm start, rebuilt if runs/game-state-warm lacks it (build_warm_start.sh, about 20 minutes).
# 2. `mapo ablate` on those units of the plan (experiments/game_state/plan.py), two at a time, each to its
#    plateau; a rerun resumes a cut one from its last checkpoint.
# 3. Whenever a unit finishes, the finished units are exported without their weights into
#    docs/study/game-state-PLAN (a share of the study: later sessions add theirs) and, with COMMIT=1,
#    committed, so a session that ends mid-study keeps every finished unit.
# 4. Across sessions (a new checkout has no runs/): with STOP_AT=HH:MM (UTC) the running units are stopped
#    at that time at a checkpoint, and the unfinished study is packed into experiments/game_state/carry/PLAN.tar
#    (the run folder with each unit's latest checkpoint only: its adapter and optimizer state, about 23 MB
#    a unit) and, with COMMIT=1, committed; the next session's call unpacks it and resumes exactly where it
#    stopped (the seed and variants are then the carried plan's). The warm start is rebuilt bit-identically
#    on this CPU (build_warm_start.sh), so the carried adapters sit on the same base.
set -euo pipefail
cd "$(dirname "$0")/../.."
PLAN=$1
SEED=$2
shift 2
RUN=runs/game-state-$PLAN
EXPORT=docs/study/game-state-$PLAN
CARRY=experiments/game_state/carry/$PLAN.tar
bash experiments/game_state/build_warm_start.sh runs/game-state-warm
if [ ! -f "$RUN/plan.json" ] && [ -f "$CARRY" ]; then
    mkdir -p "$RUN" && tar -xf "$CARRY" -C "$RUN"
    echo "resuming the carried study: $(ls "$RUN/runs" | tr '\n' ' ')" >&2
    if ! (cd runs/game-state-warm/sft/final && sha256sum --quiet -c "../../../../$RUN/warm_start.sha256"); then
        echo "the rebuilt warm start differs from the one the carried units trained on: not resuming" >&2
        exit 1
    fi
fi
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
finished() { ls "$RUN"/evals/*/eval.json 2>/dev/null | sort | tr '\n' ' '; }

# the unfinished study, each unit's latest checkpoint only, into $CARRY (removed once nothing is left to run)
carry_out() {
    [ -f "$RUN/plan.json" ] || return 0
    local skip=() unit
    for unit in "$RUN"/runs/*/; do
        local kept
        kept=$(ls -d "$unit"checkpoints/step-* 2>/dev/null | sort | head -n -1)
        for c in $kept; do skip+=(--exclude="./${c#"$RUN"/}"); done
    done
    (cd runs/game-state-warm/sft/final && sha256sum model.safetensors) > "$RUN/warm_start.sha256"
    mkdir -p "$(dirname "$CARRY")"
    # final/ is a chunk end's copy of its checkpoint: the resumed chunk writes it again
    tar -cf "$CARRY" "${skip[@]}" --exclude='./runs/*/final' -C "$RUN" .
    if [ "${COMMIT:-0}" = 1 ]; then
        git add "$CARRY" && git commit -q -m "experiments/game_state/carry/$PLAN.tar: the unfinished units at $(date -u +%H:%M), latest checkpoints" -- "$CARRY"
    fi
}
drop_carry() {
    if [ -f "$CARRY" ]; then
        git rm -q --cached "$CARRY" 2>/dev/null || true
        rm -f "$CARRY"
        [ "${COMMIT:-0}" = 1 ] && git commit -q -m "experiments/game_state/carry/$PLAN.tar: nothing left to carry" -- "$CARRY" || true
    fi
}
stop_at() {  # STOP_AT=HH:MM: stop the units at a checkpoint then (a session's end comes without warning)
    local target
    target=$(date -u -d "${STOP_AT}" +%s)
    while [ "$(date -u +%s)" -lt "$target" ]; do sleep 20; done
    echo "STOP_AT ${STOP_AT}: stopping the units at a checkpoint" >&2
    kill -TERM $$
}
WATCH=
[ -n "${STOP_AT:-}" ] && { stop_at & WATCH=$!; }
stopping=0
trap 'stopping=1; kill -TERM "$ABLATE" 2>/dev/null' TERM INT
# A unit killed from outside (out of memory: a run on vLLM still grows by a few hundred MB a step,
# docs/results.md 2026-12-02) stops the ablation with its checkpoints kept: resume, up to 20 times.
complete=0
for attempt in $(seq 20); do
    if [ -f "$RUN/plan.json" ]; then
        mapo ablate --resume "$RUN" --jobs 2 &
    else
        mapo ablate --plan "experiments.game_state.plan:state_${PLAN}_plan" --seed "$SEED" "${VARIANTS[@]}" --jobs 2 \
            --output "$RUN" &
    fi
    ABLATE=$!
    seen=$(finished)
    while kill -0 "$ABLATE" 2>/dev/null; do
        sleep 60
        now=$(finished)
        if [ "$now" != "$seen" ]; then export_finished; seen=$now; fi
    done
    if wait "$ABLATE"; then complete=1; break; fi
    [ "$stopping" = 1 ] && break
    echo "the ablation stopped (attempt $attempt); resuming from the checkpoints" >&2
    sleep 10
done
export_finished
[ -n "$WATCH" ] && { kill "$WATCH" 2>/dev/null || true; }
if [ "$complete" = 1 ]; then drop_carry; else carry_out; fi
