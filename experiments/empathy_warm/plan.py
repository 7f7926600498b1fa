"""`--plan empathy-warm`: empathy from the warm start (issue #28, part 2; docs/study/empathy-warm*,
docs/blind/empathy-warm-*): the library's empathy template as this study ran it, MAPO against GRPO
from a `mapo sft` checkout given on the command line (`--set policy.model=<sft output>/final`)."""

from __future__ import annotations

import dataclasses

from mapo.lab.ablate.plan import AblationPlan, empathy_plan


def empathy_warm_plan() -> AblationPlan:
    """MAPO against GRPO on IDR, 5 seeds, from a supervised warm start on the empathy task."""
    return dataclasses.replace(empathy_plan(), name="empathy-warm")
