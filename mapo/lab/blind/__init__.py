"""Blind side-by-side rating of two evaluations' dialogues (docs/blind-rating.md).

- `pairs` (`mapo compare --blind A B`): the pairs a rater reads, and the key kept apart;
- `score` (`--score-blind`): the ratings unblinded with the key;
- `pool` (`--pool-blind`): several scored sets pooled (one per seed pair);
- `dialogue_sets`: the dialogues of a blind set (or a transcripts file) to measure afterwards;
- `reask`: re-asked questions and other repeated moves in those dialogues;
- `rescore`: a blind set scored again by today's judge, and how often it agrees with the rater.
"""
