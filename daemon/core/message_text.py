"""What a peer message's text and id may hold, checked before anything is stored.

The text is printable characters and newlines only: ESC, CR, TAB, every other Cc/Cf
character, bidirectional overrides and isolates, line/paragraph separators, private-use and
unassigned code points are refused, naming the first one and its offset. The byte cap counts
UTF-8 bytes. A message id is 1-128 characters of letters, digits and ``. _ : -``.
"""

from __future__ import annotations

from openbus.kernel.errors import BadRequest, Refused
from openbus.kernel.ids import SESSION_ID

# Spaces other than U+0020 are printable text; everything else str.isprintable() rejects
# (Cc, Cf, Cs, Co, Cn, Zl, Zp) is refused, and the newline is the one control allowed.
_SPACES = "\u00a0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u202f\u205f\u3000"
_TO_PRINTABLE = str.maketrans(dict.fromkeys([*_SPACES, "\n"], " "))
_NAMED = {
    "\x1b": "escape",
    "\r": "carriage return",
    "\t": "tab",
    "\x00": "NUL",
    "\x7f": "delete",
    "\u2028": "line separator",
    "\u2029": "paragraph separator",
    "\u200e": "left-to-right mark",
    "\u200f": "right-to-left mark",
    "\u061c": "arabic letter mark",
}
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def _describe(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if ch in _BIDI:
        return "bidirectional override"
    if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
        return "control character"
    return "non-printable character"


def check_text(text: object, max_bytes: int) -> int:
    """The UTF-8 size of an admissible message text; raise ``Refused``/``BadRequest`` if not."""
    if not isinstance(text, str):
        raise BadRequest("text must be a string", field="text")
    if not text:
        raise BadRequest("text must not be empty", field="text")
    if len(text) > max_bytes:  # every character is at least one byte: refuse before encoding
        raise Refused(f"text is longer than the {max_bytes}-byte cap", field="text")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    if size > max_bytes:
        raise Refused(f"text is {size} bytes, above the {max_bytes}-byte cap", field="text")
    flat = text.translate(_TO_PRINTABLE)
    if not flat.isprintable():
        for offset, ch in enumerate(flat):
            if not ch.isprintable():
                raise Refused(
                    f"text holds U+{ord(ch):04X} ({_describe(ch)}) at offset {offset}: only "
                    "printable text and newlines are allowed",
                    field="text",
                )
    if size < 0:  # pragma: no cover - a lone surrogate is not printable, refused above
        raise Refused("text is not valid Unicode", field="text")
    return size


def check_message_id(message_id: object) -> str:
    if not isinstance(message_id, str) or not SESSION_ID.fullmatch(message_id):
        raise BadRequest(
            "message_id must be 1-128 characters of letters, digits and . _ : - "
            "(starting with a letter or digit)",
            field="message_id",
        )
    return message_id


__all__ = ["check_message_id", "check_text"]
