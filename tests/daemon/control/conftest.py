"""The control tests run on the messaging tests' in-process daemon over a real tmux server."""

from tests.daemon.messaging.conftest import run_world, server

__all__ = ["run_world", "server"]
