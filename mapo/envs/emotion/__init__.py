"""The K = 1 emotion-score environment (SAGE / RLVER style), registered as "emotion".

    env       EmotionEnvironment: the emotion e in [0, 100], its dynamics and endings
    persona   the simulated person, from a persona JSONL line or an empathy scenario card
    judges    how much a reply changes the emotion: offline (sentence embeddings) or an LLM
    user      the offline simulated user (reactions, the story in the first person)
"""

from mapo.envs.emotion.env import EmotionConfig, EmotionEnvironment
from mapo.envs.emotion.persona import load_personas

__all__ = ["EmotionConfig", "EmotionEnvironment", "load_personas"]
