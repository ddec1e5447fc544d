"""The built-in maxima of the daemon's limits, which an org policy may only tighten.

These are the ceilings the daemon enforces with no policy at all. A policy's ``[limits]``
table may lower any of them; a value above its built-in maximum is an error (the policy is
refused, naming the field and line), never silently clamped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType

# A message is typed into the recipient's composer as one bracketed paste; the tmux transport
# carries far more, but the harnesses' composers do not all take a paste much past 12,000
# bytes, so the text stays well below that and its typed form (the stamp, and a quote bar on
# every line) must fit TYPED_BYTES_MAX, under the smallest paste every harness took whole.
MESSAGE_BYTES_MAX = 8 * 1024
TYPED_BYTES_MAX = 11 * 1024
SENDER_RATE_PER_MINUTE_MAX = 30
PAIR_RATE_PER_MINUTE_MAX = 10
HOP_LIMIT_MAX = 4
QUEUE_BYTES_MAX = 1024 * 1024
IDS_PER_PRINCIPAL_MAX = 1000

BUILTIN_MAXIMA: Mapping[str, int] = MappingProxyType(
    {
        "message_bytes": MESSAGE_BYTES_MAX,
        "sender_rate_per_minute": SENDER_RATE_PER_MINUTE_MAX,
        "pair_rate_per_minute": PAIR_RATE_PER_MINUTE_MAX,
        "hop_limit": HOP_LIMIT_MAX,
        "queue_bytes": QUEUE_BYTES_MAX,
        "ids_per_principal": IDS_PER_PRINCIPAL_MAX,
    }
)

# The smallest value a policy may set. A hop limit of 0 means every relayed message needs a
# card; every other limit must leave at least one of its unit (use a cap of "off" to forbid).
MINIMA: Mapping[str, int] = MappingProxyType(
    {name: (0 if name == "hop_limit" else 1) for name in BUILTIN_MAXIMA}
)

DESCRIPTIONS: Mapping[str, str] = MappingProxyType(
    {
        "message_bytes": "largest message text, in bytes (UTF-8)",
        "sender_rate_per_minute": "messages one sender may send per minute",
        "pair_rate_per_minute": "messages one sender may send to one recipient per minute",
        "hop_limit": "relay hops before a message needs a card again",
        "queue_bytes": "bytes of queued messages held per recipient",
        "ids_per_principal": "unexpired message ids one principal may hold",
    }
)


@dataclass(frozen=True)
class Limits:
    """The limits in force: the built-in maxima, possibly tightened by the org policy."""

    message_bytes: int = MESSAGE_BYTES_MAX
    sender_rate_per_minute: int = SENDER_RATE_PER_MINUTE_MAX
    pair_rate_per_minute: int = PAIR_RATE_PER_MINUTE_MAX
    hop_limit: int = HOP_LIMIT_MAX
    queue_bytes: int = QUEUE_BYTES_MAX
    ids_per_principal: int = IDS_PER_PRINCIPAL_MAX

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not MINIMA[name] <= value <= BUILTIN_MAXIMA[name]:
                raise ValueError(
                    f"{name} must be between {MINIMA[name]} and {BUILTIN_MAXIMA[name]}, got {value}"
                )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def tightened(self) -> dict[str, int]:
        """The limits below their built-in maximum (what the policy changed)."""
        return {k: v for k, v in asdict(self).items() if v < BUILTIN_MAXIMA[k]}


BUILTIN_LIMITS = Limits()
