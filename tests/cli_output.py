"""What CLI tests read from typer's output: the text without rich's error box and line wrapping."""


def flat(output: str) -> str:
    """CLI output with rich's error box and line wrapping removed."""
    return " ".join(output.replace("│", " ").split())
