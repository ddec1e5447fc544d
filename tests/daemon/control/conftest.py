"""The control tests run on the messaging tests' in-process daemon over a real tmux server,
and with the real harnesses' fixtures (the stub model, a private tmux server)."""

from tests.daemon.messaging.conftest import run_world, server
from tests.daemon.messaging.test_real_harnesses import stub, tmux

__all__ = ["run_world", "server", "stub", "tmux"]
