"""`--plan study`: the learning study on the empathy task (issue #18; docs/study/ablation.md).

Long dialogues, whole replies (the default run's 96 tokens and 3 sentences, at most 20 % cut),
5 seeds, the same rollout budget for every variant. Sized for 2 shared cores (docs/results.md
has the arithmetic): one scenario x 4 dialogues x 6 turns is 24 replies a step, the default
run's count at twice its horizon; 10 steps a run.
"""

from __future__ import annotations

from mapo.lab.ablate.plan import AblationPlan, BenchmarkBudget, EvalBudget

STUDY_TRAIN = (
    "rollout.scenarios_per_step=1",
    "rollout.samples_per_scenario=4",
    "rollout.max_turns=6",
    "rollout.max_new_tokens=96",
    "rollout.max_sentences=3",
    "optim.micro_batch_tokens=1024",
    "checkpoint_every=2",
    "transcripts_every=4",
)
STUDY_BENCH_DATA = "../shared/data"  # where this project's checkouts keep the authors' files (--bench-data)


def study_plan() -> AblationPlan:
    """MAPO against GRPO, turn-only and batch-only on IDR, 5 seeds, 6-turn training dialogues;
    held-out eval on the 12 test cards x 2 dialogues at 13 turns; EQ-Bench v2 and EmoBench on
    the base, GRPO and MAPO."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr", "turn-idr", "batch-idr"],
        seeds=[0, 1, 2, 3, 4],
        steps=10,
        train=list(STUDY_TRAIN),
        eval=EvalBudget(scenarios="test", samples=2, max_turns=13, max_new_tokens=96, max_sentences=3),
        benchmarks=BenchmarkBudget(targets=["base", "grpo-idr", "mapo-idr"], data=STUDY_BENCH_DATA, limit=20),
        name="study",
    )
