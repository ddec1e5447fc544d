"""Fixtures for the history tests that drive the real Claude Code and Codex CLIs."""

from tests.support.harnesses import claude, codex
from tests.support.stub_model import stub_model

__all__ = ["claude", "codex", "stub_model"]
