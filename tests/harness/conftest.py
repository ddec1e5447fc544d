"""Fixtures for the tests of the harness test infrastructure (stub model, tmux, real CLIs)."""

from tests.support.harnesses import claude, codex
from tests.support.stub_model import stub_model
from tests.support.tmux_server import harness_tmux

__all__ = ["claude", "codex", "harness_tmux", "stub_model"]
