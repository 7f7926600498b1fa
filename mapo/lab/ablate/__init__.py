"""`mapo ablate`: train every variant with several seeds under one rollout budget, evaluate all.

A *variant* is a name plus config overrides (`--set` style) on top of the plan's
common training settings; the registry (`variants.VARIANTS`) holds the paper's grid
(estimator x reward) and later options (redundancy reweighting, RAPO); plug-in packages
add more. Every run gets the same budget: steps x scenarios_per_step x samples_per_scenario
dialogues. A *plan* (`plan.PLANS`: default, quick, game, empathy; this project's studies'
plans under experiments/ in a checkout) fixes variants, seeds, training settings, the
held-out evaluation and the outside benchmarks.

    variants    the variant registry and its grid
    plan        the plan and its units, the named plans
    state       the ablation folder on disk (what is done, what to resume)
    runner      one unit (train, evaluate, benchmark), the base, the process pool
    plateau     the plateau stopping rule (AblationPlan.stop): train in chunks, stop where held-out success levels off
    benchmarks  EQ-Bench v2 and EmoBench on a unit's policy, resumable
    stats       figures per run, evaluation and dialogue; mean ± std; paired differences with CIs
                (the interval maths: mapo.intervals)
    tables      the report's tables as markdown and HTML
    excerpts    side-by-side transcript excerpts picked by a stated rule
    curves      curves.png
    report      ablation.{json,md,html}
"""

from mapo.intervals import cluster_bootstrap, t_interval, t_quantile
from mapo.lab.ablate.plan import (
    PLANS,
    AblationPlan,
    BenchmarkBudget,
    CurveBudget,
    EvalBudget,
    Unit,
    empathy_plan,
    game_plan,
    plan_for,
    quick_plan,
    unit_overrides,
)
from mapo.lab.ablate.plateau import PlateauStop
from mapo.lab.ablate.report import write_outputs
from mapo.lab.ablate.runner import run_ablation, run_unit
from mapo.lab.ablate.state import check_plan, read_plan, run_dir, training_state
from mapo.lab.ablate.stats import (
    aggregate_rows,
    dialogue_metrics,
    eval_metrics,
    mean_std,
    paired_dialogue_rows,
    paired_rows,
    training_metrics,
)
from mapo.lab.ablate.tables import Table, to_markdown
from mapo.lab.ablate.variants import DEFAULT_VARIANTS, VARIANTS, Variant, register_variant

__all__ = [
    "DEFAULT_VARIANTS",
    "PLANS",
    "VARIANTS",
    "AblationPlan",
    "BenchmarkBudget",
    "CurveBudget",
    "EvalBudget",
    "PlateauStop",
    "Table",
    "Unit",
    "Variant",
    "aggregate_rows",
    "check_plan",
    "cluster_bootstrap",
    "dialogue_metrics",
    "empathy_plan",
    "eval_metrics",
    "game_plan",
    "mean_std",
    "paired_dialogue_rows",
    "paired_rows",
    "plan_for",
    "quick_plan",
    "read_plan",
    "register_variant",
    "run_ablation",
    "run_dir",
    "run_unit",
    "t_interval",
    "t_quantile",
    "to_markdown",
    "training_metrics",
    "training_state",
    "unit_overrides",
    "write_outputs",
]
