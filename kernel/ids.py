"""The identifiers every part of openbus checks, written once.

A tmux pane id is ``%`` and 1-9 ASCII digits. A harness session id and a message id are 1-128
characters of ASCII letters, digits and ``. _ : -``, starting with a letter or digit.
"""

from __future__ import annotations

import re

from openbus.kernel.errors import BadRequest

PANE_ID = re.compile(r"%[0-9]{1,9}")
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # message ids share the form


def is_pane_id(value: object) -> bool:
    return isinstance(value, str) and PANE_ID.fullmatch(value) is not None


def check_pane_id(value: object, field: str = "pane") -> str:
    """``value`` if it is a pane id, else ``BadRequest`` naming ``field``."""
    if not isinstance(value, str) or PANE_ID.fullmatch(value) is None:
        raise BadRequest(f"not a tmux pane id (like %3): {value!r}", field=field)
    return value
