"""Paths the tests share, so that a test module can live in any folder of tests/ (mirroring mapo/)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent
