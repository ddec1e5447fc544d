"""The CLI's verbs over the human API. Each feature adds its own ``register(sub)``."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add every verb's parser to ``sub``."""
    from openbus.daemon import cli_consent

    cli_consent.register(sub)
    from openbus.daemon import cli_history

    cli_history.register(sub)
    from openbus.daemon import cli_audit

    cli_audit.register(sub)
    from openbus.daemon import cli_directory

    cli_directory.register(sub)
    from openbus.daemon import cli_launch

    cli_launch.register(sub)
    from openbus.daemon import cli_messages

    cli_messages.register(sub)
