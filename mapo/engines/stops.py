"""The sentence stop rule, counted as a reply grows instead of re-decoding it every step.

`count_sentences` (mapo.text) finds sentence ends: a run of . ! ? (closing quotes or
brackets after it) followed by whitespace or the end of the text. No match holds
whitespace, so the count of a text A + B where B starts with whitespace is the count
of A plus the count of B. The counter keeps such a split: the ids before it are
"settled" with their sentence count, and only the ids after it (usually a few) are
decoded each step. It moves the split only where decoding showed the text growing by
exactly the new id's text, starting with whitespace (never inside a character split
over two ids), so the count equals `count_sentences(decode(all ids))` at every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mapo.text import count_sentences


class SentenceCounter:
    """Sentence ends in a growing reply, `decode` being the tokenizer's (special ids skipped)."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.settled = 0  # sentence ends in the settled text
        self.tail: list[int] = []  # ids after the split
        self.tail_text = ""

    def push(self, token: int) -> int:
        """Add one reply id; the sentence ends in the whole reply so far."""
        text = self.decode([*self.tail, token])
        if self.tail and text.startswith(self.tail_text) and text[len(self.tail_text) : len(self.tail_text) + 1].isspace():
            # the new id's text starts with whitespace: settle what came before it
            self.settled += count_sentences(self.tail_text)
            self.tail, text = [token], text[len(self.tail_text) :]
        else:
            self.tail.append(token)
        self.tail_text = text
        return self.settled + count_sentences(text)


def sentence_stop(decode: Callable[[list[int]], str], ids: Sequence[int], limit: int) -> int | None:
    """The length of the shortest prefix of `ids` holding `limit` sentences, or None."""
    counter = SentenceCounter(decode)
    for k, token in enumerate(ids):
        if counter.push(int(token)) >= limit:
            return k + 1
    return None
