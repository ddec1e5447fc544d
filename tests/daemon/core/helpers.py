"""Shortcuts over the message book that only tests take (the daemon checks, audits, commits)."""

from __future__ import annotations

from typing import Any

from openbus.daemon.core.messaging import Admission, Message, MessageBook


def admit(book: MessageBook, **fields: Any) -> Admission:
    """``check`` then ``commit``, with nothing between (the daemon writes its record there)."""
    admission = book.check(**fields)
    book.commit(admission)
    return admission


def due(book: MessageBook) -> list[Message]:
    """``expire_due()``, then every final message whose hour is over (to ``release``)."""
    book.expire_due()
    return book.releasable()
