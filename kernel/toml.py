"""Reading TOML: a file with one clear error naming the file, and text whose every failure is a
``tomllib.TOMLDecodeError`` (tomllib raises ``RecursionError`` for arrays or inline tables
nested past the interpreter's depth; ``loads`` makes that one more decode error)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openbus.kernel.errors import ConfigError


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``, a value nested too deep raised as a ``TOMLDecodeError``."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("values nested deeper than the reader goes") from None


def read_toml(path: Path, reader: Callable[[Path], bytes] | None = None) -> dict[str, Any]:
    """A TOML file as a table; any failure is a ``ConfigError`` naming the file."""
    read = reader or (lambda p: p.read_bytes())
    try:
        raw = read(path)
    except FileNotFoundError:
        raise ConfigError("no such file", path=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(path)) from None
    try:
        data = loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML ({exc})", path=str(path)) from None
    return data
