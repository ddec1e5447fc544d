"""Launch tokens: 256 random bits with a recognizable prefix; only their hash is stored.

The prefix (``obk_``) lets secret scanners and people recognise a leaked token. Hashing is
a plain SHA-256: the token carries 256 bits of entropy, so no salt or stretching is needed,
and lookups stay O(1). Comparison happens on hashes in the database, never on the secret.
"""

from __future__ import annotations

import base64
import hashlib
import re

from openbus.kernel.clock import Random

PREFIX = "obk_"
_SHAPE = re.compile(r"^obk_[A-Za-z0-9_-]{43}$")


def mint(random: Random) -> str:
    raw = random.token_bytes(32)
    return PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def well_formed(token: str) -> bool:
    return bool(_SHAPE.fullmatch(token))
