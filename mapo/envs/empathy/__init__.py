"""The EMPA-style empathy environment, registered as "empathy". Importing this package
registers it; no model is loaded until a role needs one.

    env            EmpathyEnvironment: a card, the need vector, three roles
    roles          what the judge, actor and director exchange; the role registry
    offline/       the roles from rules and sentence embeddings
    llm/           the roles from any chat model
    cards          the YAML scenario cards, their schema and the bundled split
    empa_markdown  EMPA's own markdown case cards (with empa_sections)
    calibrate      the judge against labelled exemplars (`mapo env calibrate`)
    console        `mapo env list` and `mapo env try`
"""

from mapo.envs.empathy.env import EmpathyEnvironment
from mapo.envs.empathy.roles import make_role, register_role

__all__ = ["EmpathyEnvironment", "make_role", "register_role"]
