"""`mapo ablate`: train every variant with several seeds under one rollout budget, evaluate all.

A *variant* is a name plus config overrides (`--set` style) on top of the plan's
common training settings; the registry (`plan.VARIANTS`) holds the paper's grid
(estimator x reward) and later options (redundancy reweighting, RAPO); plug-in packages
add more. Every run gets the same budget: steps x scenarios_per_step x samples_per_scenario
dialogues.

    plan      variants, the named plans (default, quick, study), the plan and its units
    state     the ablation folder on disk (what is done, what to resume)
    runner    one unit, the base, the process pool
    stats     figures per run and evaluation, mean ± std over seeds, paired differences
    report    ablation.{json,md,html} and curves.png
"""

from mapo.ablate.plan import (
    DEFAULT_VARIANTS,
    PLANS,
    VARIANTS,
    AblationPlan,
    BenchmarkBudget,
    EvalBudget,
    Unit,
    Variant,
    plan_for,
    quick_plan,
    register_variant,
    study_plan,
    unit_overrides,
)
from mapo.ablate.report import paired_dialogue_markdown, to_markdown, write_outputs
from mapo.ablate.runner import run_ablation, run_unit
from mapo.ablate.state import check_plan, read_plan, run_dir, training_state
from mapo.ablate.stats import (
    aggregate_rows,
    dialogue_metrics,
    eval_metrics,
    mean_std,
    paired_dialogue_rows,
    paired_rows,
    training_metrics,
)

__all__ = [
    "DEFAULT_VARIANTS",
    "PLANS",
    "VARIANTS",
    "AblationPlan",
    "BenchmarkBudget",
    "EvalBudget",
    "Unit",
    "Variant",
    "aggregate_rows",
    "check_plan",
    "dialogue_metrics",
    "eval_metrics",
    "mean_std",
    "paired_dialogue_markdown",
    "paired_dialogue_rows",
    "paired_rows",
    "plan_for",
    "quick_plan",
    "read_plan",
    "register_variant",
    "run_ablation",
    "run_dir",
    "run_unit",
    "study_plan",
    "to_markdown",
    "training_metrics",
    "training_state",
    "unit_overrides",
    "write_outputs",
]
