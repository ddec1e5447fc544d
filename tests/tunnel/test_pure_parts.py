"""The tunnel's pure parts: throttle, sealed sessions, config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from openbus.kernel.errors import ConfigError
from openbus.kernel.testing import FixedClock, SeededRandom
from openbus.tunnel.config import parse_tunnel_config
from openbus.tunnel.session import SessionSealer, new_key_ring_line, parse_key_ring
from openbus.tunnel.throttle import LoginThrottle


def test_the_throttle_blocks_a_user_after_max_failures_until_the_window_passes() -> None:
    clock = FixedClock()
    throttle = LoginThrottle(clock, max_failures=3, window=60, base_delay=1, max_delay=8)
    delays = [throttle.failed("alice", f"10.0.0.{n}") for n in range(3)]
    assert delays == [1, 2, 4]
    assert throttle.retry_after("alice", "10.0.0.9") == 60
    clock.advance(61)
    assert throttle.retry_after("alice", "10.0.0.9") == 0


def test_a_success_clears_the_user_but_not_the_address() -> None:
    throttle = LoginThrottle(FixedClock(), max_failures=2)
    throttle.failed("alice", "10.0.0.1")
    throttle.failed("bob", "10.0.0.1")
    throttle.succeeded("alice")
    assert throttle.retry_after("alice", "10.0.0.2") == 0
    assert throttle.retry_after("carol", "10.0.0.1") > 0


def test_the_throttle_stays_bounded() -> None:
    throttle = LoginThrottle(FixedClock(), capacity=10)
    for n in range(100):
        throttle.failed(f"u{n}", f"a{n}")
    assert len(throttle._failures) <= 10


def sealer(clock: FixedClock, keys: list[bytes] | None = None) -> SessionSealer:
    rnd = SeededRandom()
    return SessionSealer(
        keys or parse_key_ring(new_key_ring_line(rnd)), clock=clock, random=rnd, ttl=100
    )


def test_a_sealed_session_opens_until_it_expires() -> None:
    clock = FixedClock()
    s = sealer(clock)
    value, session = s.seal("alice")
    assert "alice" not in value
    assert s.open(value) == session
    clock.advance(100)
    assert s.open(value) is None


def test_a_tampered_or_foreign_session_does_not_open() -> None:
    clock = FixedClock()
    s = sealer(clock)
    value, _ = s.seal("alice")
    assert s.open(value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]) is None
    other = sealer(clock, parse_key_ring(new_key_ring_line(SeededRandom(7))))
    assert other.open(value) is None
    assert s.open("garbage") is None


def test_a_rotated_key_ring_still_opens_old_sessions() -> None:
    clock = FixedClock()
    old = parse_key_ring(new_key_ring_line(SeededRandom(1)))
    new = parse_key_ring(new_key_ring_line(SeededRandom(2)))
    value, session = sealer(clock, old).seal("alice")
    assert sealer(clock, new + old).open(value) == session


def test_a_revoked_session_does_not_open() -> None:
    clock = FixedClock()
    s = sealer(clock)
    value, session = s.seal("alice")
    s.revoke(session)
    assert s.open(value) is None


def test_a_bad_key_ring_says_which_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_key_ring("# keys\nnot base64!\n")


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"tunnel": {"listen": "nowhere"}}, "tunnel.listen"),
        ({"tunnel": {"bogus": 1}}, "tunnel.bogus"),
        ({"other": {}}, "other"),
        ({"tunnel": {"session_seconds": -1}}, "tunnel.session_seconds"),
        ({"tunnel": {"credential": 5}}, "tunnel.credential"),
        ({"tunnel": {"pam_service": "../x"}}, "tunnel.pam_service"),
    ],
)
def test_config_errors_name_the_key_and_the_file(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_tunnel_config(data, Path("/etc/openbus/tunnel.toml"))
    assert info.value.key == key
    assert "/etc/openbus/tunnel.toml" in str(info.value)


def test_a_session_opened_before_is_refused_once_revoked_or_expired() -> None:
    clock = FixedClock()
    s = sealer(clock)
    value, session = s.seal("alice")
    other, _ = s.seal("bob")
    assert s.open(value) == session
    assert s.open(value) == session  # the second open is remembered, not decrypted again
    s.revoke(session)
    assert s.open(value) is None
    assert s.open(other) is not None
    clock.advance(100)
    assert s.open(other) is None
