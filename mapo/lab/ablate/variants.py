"""The ablation's variants: a name and the config overrides it applies on top of a plan's training
settings. The registry holds the paper's grid (estimator x reward), the options added since
(redundancy reweighting, RAPO, the alpha sweep's inner points) and the grid at learning rate 2e-4;
plug-in packages add more."""

from __future__ import annotations

from dataclasses import dataclass

from mapo.registry import Registry


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[str, ...]  # `--set` assignments applied on top of the plan's training settings
    description: str = ""


# Plug-ins: `register_variant`, an entry point of group "mapo.ablation_variants" (a Variant), or a
# "package.module:VARIANT" path.
VARIANTS: Registry[Variant] = Registry("ablation variant", group="mapo.ablation_variants")


def register_variant(name: str, *overrides: str, description: str = "") -> Variant:
    """Add a variant (a name and its config overrides) to the ablation grid."""
    if name in VARIANTS:
        raise ValueError(f"ablation variant {name!r} is already registered")
    if not name or "/" in name or name == "base":
        raise ValueError(f"ablation variant name {name!r}: must be non-empty, without '/', and not 'base'")
    return VARIANTS.add(name, Variant(name, tuple(overrides), description))


def _estimator_variant(estimator: str, reward: str, description: str) -> Variant:
    return register_variant(
        f"{estimator}-{reward}",
        f"advantage.estimator={estimator}",
        f"reward.kind={reward}",
        description=description,
    )


_estimator_variant("mapo", "idr", "MAPO mixed advantage, incremental distance reward")
_estimator_variant("mapo", "adr", "MAPO mixed advantage, absolute distance reward")
_estimator_variant("mapo_ragged", "idr", "MAPO without the T_min cut: turn t normalised over the dialogues that reach it")
_estimator_variant("mapo_state", "idr", "mapo_ragged with returns normalised among the turns that share a state key")
_estimator_variant("turn", "idr", "turn-level normalised returns only (alpha = 1)")
_estimator_variant("batch", "idr", "batch-level normalised rewards only (alpha = 0)")
_estimator_variant("grpo", "idr", "GRPO: one trajectory-level advantage for every turn")
_estimator_variant("reinforce_pp", "idr", "REINFORCE++: batch-normalised returns")
_estimator_variant("rloo", "idr", "RLOO: return minus the mean of the group's other returns, every turn")
_estimator_variant("mapo", "outcome", "MAPO on the outcome-only reward (D_0 - D_T on the last turn)")
for _alpha in ("0.25", "0.75"):  # the alpha sweep's inner points (0 is batch-idr, 1 is turn-idr, 0.5 mapo-idr)
    register_variant(f"mapo-a{_alpha}-idr", "advantage.estimator=mapo", f"advantage.alpha={_alpha}", "reward.kind=idr",
                     description=f"MAPO with alpha = {_alpha} (turn-level share of the mix)")
# the grid at a lower learning rate than the trainer's 5e-4, the steadier rate on the game (the
# game-lr plan; then the game-turns plans)
for _name in ("mapo-idr", "mapo_ragged-idr", "mapo_state-idr", "grpo-idr", "turn-idr", "batch-idr", "rloo-idr",
              "mapo-outcome", "mapo-a0.25-idr", "mapo-a0.75-idr"):
    register_variant(f"{_name}-lr2e-4", *VARIANTS.resolve(_name).overrides, "optim.lr=2e-4",
                     description=f"{_name} at learning rate 2e-4")
# two probes of where the state-keyed MAPO levels off on the game (docs/results.md, 2026-12-03): its
# sampling entropy falls and a step's games converge on the same states, so one samples more widely
# and one draws more secrets a step for the same number of games
register_variant("mapo_state-idr-lr2e-4-t1", *VARIANTS.resolve("mapo_state-idr-lr2e-4").overrides,
                 "rollout.temperature=1.0", description="mapo_state-idr-lr2e-4 sampled at temperature 1 (held out as before)")
register_variant("mapo_state-idr-lr2e-4-4x4", *VARIANTS.resolve("mapo_state-idr-lr2e-4").overrides,
                 "rollout.scenarios_per_step=4", "rollout.samples_per_scenario=4",
                 description="mapo_state-idr-lr2e-4 on 4 scenarios x 4 dialogues a step")

# COMPEER and RAPO options on top of mapo-idr (docs/methods.md)
register_variant("mapo-idr-redundancy", "reward.redundancy=true", description="+ COMPEER redundancy reweighting")
register_variant(
    "mapo-idr-reasoning",
    "reasoning.enabled=true",
    "rollout.max_new_tokens=160",
    description="+ COMPEER structured reasoning and format reward (longer replies: the tags need room)",
)
register_variant("mapo-idr-hindsight", "rapo.hindsight=quantile", description="+ RAPO hindsight selection, its quantile proxy (|r| >= median)")
register_variant("mapo-idr-distill", "rapo.distill=true", description="+ RAPO verbal self-distillation")
register_variant(
    "rapo-branching",
    "rapo.branching=true",
    "rapo.distill=true",
    description="RAPO: one-turn lookahead groups ranked by the offline ranker, plus self-distillation",
)

DEFAULT_VARIANTS = ("mapo-idr", "mapo-adr", "turn-idr", "batch-idr", "grpo-idr", "reinforce_pp-idr")
