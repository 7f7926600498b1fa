"""Where a reply's sentences end: the stop rule `rollout.max_sentences` counts these.

Shared by the in-process sampler (mapo.policy) and the llama.cpp worker, which must
stop a reply at exactly the same token; kept free of torch so the worker stays light.
"""

from __future__ import annotations

import re

# a run of . ! ? (an ellipsis counts once), closing quotes or brackets, then a space or the end
SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)")


def count_sentences(text: str) -> int:
    """How many sentence ends `text` holds."""
    return len(SENTENCE_END.findall(text))
