"""Helpers of the questioning-game tests: play a game reply by reply, write a case file of one's own."""

from __future__ import annotations

import json

import pytest

from mapo.envs.base import make_environment
from mapo.envs.questioning.cases import forget_case_sets


def play(env_name, scenario, replies, **options):
    """Feed `replies` (a list, or a callable conversation -> reply) until the game ends; returns
    (infos, distances D_0..D_T, conversation)."""
    env = make_environment(env_name, **options)
    opening = env.reset(scenario)
    conversation = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": opening}]
    distances = [-env.initial_state[0]]
    infos = []
    for t in range(1000):
        reply = replies(conversation) if callable(replies) else replies[t % len(replies)]
        result = env.step(reply)
        infos.append(result.info)
        distances.append(result.info["distance"])
        assert result.action == pytest.approx((distances[-2] - distances[-1],))
        assert result.info["state"] == pytest.approx((-distances[-1],))
        conversation += [{"role": "assistant", "content": reply}, {"role": "user", "content": result.user_message}]
        if result.done:
            return infos, distances, conversation
    raise AssertionError("the game never ended")


# A world the bundled case sets do not hold: vehicles, told apart by what they run on and with.
VEHICLES = {
    "name": "vehicles",
    "tables": [{
        "name": "vehicles",
        "subject": "vehicle",
        "attributes": {
            "wheels": {"question": "Does it have wheels?", "phrases": ["wheels", "wheel"]},
            "engine": {"question": "Does it have an engine?", "phrases": ["engine", "motor"]},
            "flies": {"question": "Can it fly?", "phrases": ["fly", "flies", "flying"]},
            "water": {"question": "Does it go on water?", "phrases": ["water"]},
            "rails": {"question": "Does it run on rails?", "phrases": ["rails"]},
            "pedals": {"question": "Does it have pedals?", "phrases": ["pedals", "pedal"]},
            "street": {"question": "Is it seen in the street?", "phrases": ["street"]},
        },
        "candidates": {
            "bicycle": {"has": ["wheels", "pedals", "street"], "split": "test"},
            "car": {"has": ["wheels", "engine", "street"]},
            "plane": {"has": ["wheels", "engine", "flies"]},
            "locomotive": {"has": ["wheels", "engine", "rails"]},
            "tram": {"has": ["wheels", "engine", "rails", "street"], "split": "test"},
            "kayak": {"has": ["water"]},
            "ferry": {"has": ["water", "engine"], "split": "test"},
            "pedalo": {"has": ["water", "pedals"]},
            "glider": {"has": ["flies"], "split": "test"},
        },
    }],
}


def write_case_file(path, data=VEHICLES):
    """Write `data` as a case file at `path` (JSON is YAML) and forget any earlier file read there."""
    path.write_text(json.dumps(data))
    forget_case_sets()
    return path
