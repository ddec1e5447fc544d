"""The control tests run on the messaging tests' in-process daemon over a real tmux server,
and with the real harnesses' fixtures (the stub model, a private tmux server: shared ones)."""

from tests.daemon.messaging.conftest import run_world, server

__all__ = ["run_world", "server"]
