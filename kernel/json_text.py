"""JSON another process wrote, read so that any text that does not read is a ``ValueError``.

``json.loads`` raises ``RecursionError``, not a ``ValueError``, for a value nested past its
decoder's depth (about a thousand levels). A reader that skips unreadable input by catching
``ValueError`` is then stopped by one line of ten thousand ``[``: a transcript, a harness's
status file or a request body that an agent wrote can end a reindex or a directory refresh.
Every read of JSON from outside the daemon (files agents and harnesses write, request bodies,
off-box audit files) goes through ``loads`` here.
"""

from __future__ import annotations

import json
from typing import Any


class TooDeep(ValueError):
    """JSON nested past the decoder's depth."""


def loads(text: str | bytes) -> Any:
    """``json.loads``, with a value nested too deep raised as ``TooDeep`` (a ``ValueError``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep("JSON nested deeper than the decoder reads") from None
