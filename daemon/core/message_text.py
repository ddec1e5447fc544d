"""What a peer message's text and id may hold, checked before anything is stored, and the
form it is typed in.

The text is printable characters and newlines only: ESC, CR, TAB, every other Cc/Cf
character, bidirectional overrides and isolates, line/paragraph separators, private-use and
unassigned code points are refused, naming the first one and its offset. The byte cap counts
UTF-8 bytes. A message id is 1-128 characters of letters, digits and ``. _ : -``.

Provenance cannot be forged. The daemon types its stamp (``[openbus message from ...]``, who
sent it) above the sender's words, so a text that could be read as a stamp would let an agent
speak as the human or as control. Two rules, because either alone leaves a gap:

* **Refused**: a line that could be read as a stamp, that is whose letters, compared as a
  reader sees them (compatibility forms and accents folded, common Cyrillic and Greek
  look-alikes read as Latin, everything but letters dropped), hold ``openbus message``.
  Refusing names the line and tells the sender why, where rewriting it silently would change
  what the recipient reads; and it catches a stamp placed mid-line, which a long line's
  wrapping can bring to the start of a screen row.
* **Framed** (``typed_form``): every line of the text is typed behind a quote bar (``│ ``),
  and the stamp says how many lines follow. The stamp is the one line the sender's text can
  never produce, whatever look-alike the refusal rule does not know: any line of the text,
  stamp-shaped or not, shows on the recipient's screen behind the bar, under the real stamp.
"""

from __future__ import annotations

import unicodedata

from openbus.kernel.errors import BadRequest, Refused
from openbus.kernel.ids import SESSION_ID
from openbus.kernel.limits import TYPED_BYTES_MAX

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
    typed = size + len(QUOTE_BAR.encode("utf-8")) * line_count(text) + STAMP_BYTES
    if typed > TYPED_BYTES_MAX:
        raise Refused(
            f"text is {line_count(text)} lines: typed with its stamp and a quote bar on every "
            f"line it would be {typed} bytes, above the {TYPED_BYTES_MAX} bytes a harness's "
            "composer takes in one paste; send fewer lines",
            field="text",
        )
    for number, line in enumerate(text.split("\n"), start=1):
        if _STAMP_WORDS in _letters(line):
            raise Refused(
                f"text line {number} could be read as the daemon's provenance stamp "
                "(it holds the words openbus message): the stamp is the daemon's alone; "
                "rephrase that line",
                field="text",
            )
    return size


# the words of the stamp, as ``_letters`` leaves them
_STAMP_WORDS = "openbusmessage"
# Cyrillic and Greek letters a reader takes for the Latin ones of the stamp's words
_LOOKALIKES = str.maketrans(
    {
        "а": "a", "в": "b", "е": "e", "ё": "e", "г": "r", "һ": "h", "і": "i", "ј": "j",
        "м": "m", "н": "h", "о": "o", "п": "n", "р": "p", "с": "c", "ѕ": "s", "т": "t",
        "у": "y", "х": "x", "ь": "b", "ԁ": "d", "ԛ": "q", "ԍ": "g", "ɡ": "g", "ս": "u",
        "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "μ": "u", "ν": "v",
        "ο": "o", "ρ": "p", "σ": "o", "τ": "t", "υ": "u", "χ": "x", "ϲ": "c", "ѵ": "v",
    }
)  # fmt: skip


def _letters(line: str) -> str:
    """The Latin letters a reader sees in ``line``, lower case, nothing else."""
    folded = unicodedata.normalize("NFKD", line).casefold()
    bare = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return "".join(ch for ch in bare.translate(_LOOKALIKES) if "a" <= ch <= "z")


QUOTE_BAR = "\u2502 "
STAMP_BYTES = 512  # room kept for the daemon's stamp line above the text


def typed_form(stamp: str, text: str) -> str:
    """What is typed into the recipient's composer: the stamp, then every line of ``text``
    behind the quote bar (the stamp should say how many lines follow: ``line_count``)."""
    return stamp + "\n" + "\n".join(QUOTE_BAR + line for line in text.split("\n"))


def line_count(text: str) -> int:
    return text.count("\n") + 1


def check_message_id(message_id: object) -> str:
    if not isinstance(message_id, str) or not SESSION_ID.fullmatch(message_id):
        raise BadRequest(
            "message_id must be 1-128 characters of letters, digits and . _ : - "
            "(starting with a letter or digit)",
            field="message_id",
        )
    return message_id


__all__ = ["QUOTE_BAR", "check_message_id", "check_text", "line_count", "typed_form"]
