"""Launch tokens: 256 bits, a recognizable prefix, stored only as a hash."""

from __future__ import annotations

from openbus.daemon.core import tokens
from openbus.kernel.clock import SystemRandom
from openbus.kernel.testing import SeededRandom


def test_a_token_has_the_prefix_and_256_bits() -> None:
    token = tokens.mint(SystemRandom())
    assert token.startswith("obk_") and tokens.well_formed(token)
    assert len(token) == 4 + 43  # 32 bytes in unpadded base64url


def test_two_tokens_differ_and_their_hashes_do_not_contain_them() -> None:
    a, b = tokens.mint(SeededRandom(1)), tokens.mint(SeededRandom(2))
    assert a != b
    assert a[4:] not in tokens.token_hash(a)


def test_a_malformed_token_is_not_well_formed() -> None:
    assert not tokens.well_formed("obk_short")
    assert not tokens.well_formed("Bearer obk_" + "a" * 43)
