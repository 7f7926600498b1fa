"""The estimators at the path the design's contract names (`mapo.advantages.compute_group`,
DESIGN.md section 5): they live in `mapo.core.advantages`, with the rest of the RL core."""

from mapo.core.advantages import (  # noqa: F401  (re-exported: the contract's path)
    ESTIMATORS,
    AdvantageParams,
    AdvantageSpec,
    compute_advantages,
    compute_batch,
    compute_group,
    get_estimator,
    register_estimator,
    returns,
)
