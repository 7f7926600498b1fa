"""The offline roles of the empathy environment: rules and sentence embeddings, no server.

    judge          the six EMPA levels of a reply from its features (`features.py`) and the
                   phrase and exemplar banks of `judge_lexicon.py`
    actor          the simulated user: speaks from the card, steered by the director
    director       when the user reveals the next story stage or a memory, steers, turns, ends
"""
