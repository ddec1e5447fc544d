"""What a ``tools/call`` result carries, read the way a text-only MCP client reads it."""

from __future__ import annotations

import json
from typing import Any


def tool_data(result: Any) -> dict[str, Any]:
    """The framed JSON of an openbus tool result: one text block, no structured copy."""
    assert result.structured_content is None, "openbus results are text only"
    assert len(result.content) == 1 and result.content[0].type == "text"
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data
