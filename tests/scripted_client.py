"""A chat client answering from a fixed list: for tests where parsing a role's reply is what is under test."""

from __future__ import annotations


class ScriptedClient:
    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    def chat(self, messages, **overrides):
        self.seen.append([dict(m) for m in messages])
        return self.replies.pop(0)
