"""MAPO on verl (multi-GPU / multi-node): advantage estimators and a dialogue agent loop.

Install with mapo's `verl` extra (verl 0.9.1): `pip install -e '.[verl]'` in a checkout, or
`pip install 'dist/mapo_rl-<version>-py3-none-any.whl[verl]'` for a built wheel (docs/verl.md). Importing this package
registers, in verl's own registries:

- advantage estimators `mapo`, `mapo_turn`, `mapo_batch`, `mapo_ragged` (`algorithm.adv_estimator=mapo`);
- the agent loop `mapo_dialogue`, which plays a mapo environment against verl's
  rollout servers and puts each turn's reward on that turn's last token.

verl imports it by itself in every process through the `verl.plugins` entry point
that mapo-rl declares, so a plain `python -m verl.trainer.main_ppo ...` sees both.
See docs/verl.md and examples/verl/.
"""

from mapo.integrations.verl._version import SUPPORTED_VERL_VERSIONS, require_verl

VERL_VERSION = require_verl()

# After the version check, on purpose: these import verl.
from mapo.integrations.verl.agent_loop import AGENT_NAME, MapoAgentLoopOutput, MapoDialogueAgentLoop  # noqa: E402
from mapo.integrations.verl.estimators import (  # noqa: E402
    ESTIMATOR_NAMES,
    TurnLayoutError,
    compute_token_advantages,
    place_turn_rewards,
    turn_rewards,
    turn_spans,
)

__all__ = [
    "AGENT_NAME",
    "ESTIMATOR_NAMES",
    "SUPPORTED_VERL_VERSIONS",
    "VERL_VERSION",
    "MapoAgentLoopOutput",
    "MapoDialogueAgentLoop",
    "TurnLayoutError",
    "compute_token_advantages",
    "place_turn_rewards",
    "turn_rewards",
    "turn_spans",
]
