"""The CLI's verbs over the human API. Each talks to the daemon through ``DaemonClient``."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add every verb's parser to ``sub``."""
    _ = argparse  # verbs are added as the human API grows
