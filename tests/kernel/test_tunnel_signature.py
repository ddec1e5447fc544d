"""The signed X-Tunnel-User codec: signature, window, replay, spellings, one opaque error."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openbus.kernel.errors import Unauthenticated
from openbus.kernel.testing import FixedClock, SeededRandom
from openbus.kernel.tunnel_signature import (
    NonceCache,
    TunnelConnection,
    TunnelVerifier,
    identity_header_names,
    is_identity_header,
    load_public_keys,
    mac,
    public_key_pem,
    sign,
    target_from_scope,
)

KEY = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()


def signed(
    clock: FixedClock,
    rnd: SeededRandom,
    *,
    user: str = "alice",
    method: str = "GET",
    target: str = "/api/directory",
    body: bytes = b"",
    key: Ed25519PrivateKey = KEY,
) -> list[tuple[str, str]]:
    return list(sign(key, method, target, user, body, clock.now(), rnd.token_bytes(16)).items())


def make(clock: FixedClock, **kw: object) -> TunnelVerifier:
    return TunnelVerifier([KEY.public_key()], clock=clock, **kw)  # type: ignore[arg-type]


def rejected(
    verifier: TunnelVerifier,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes = b"",
) -> str:
    with pytest.raises(Unauthenticated) as info:
        verifier.verify(method, target, headers, body)
    assert str(info.value) == "tunnel identity not accepted"
    return info.value.rejection_reason  # type: ignore[attr-defined, no-any-return]


def test_a_signed_request_yields_its_user() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd, method="POST", target="/api/launch?x=1", body=b'{"a":1}')
    assert make(clock).verify("POST", "/api/launch?x=1", headers, b'{"a":1}') == "alice"


def test_bytes_headers_as_asgi_gives_them_are_accepted() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = [(k.lower().encode(), v.encode()) for k, v in signed(clock, rnd)]
    assert make(clock).verify("GET", "/api/directory", headers, b"") == "alice"


def test_a_replayed_request_is_refused() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    headers = signed(clock, rnd)
    verifier.verify("GET", "/api/directory", headers, b"")
    clock.advance(5)
    assert rejected(verifier, "GET", "/api/directory", headers) == "replayed nonce"


def test_a_replay_after_the_window_is_refused_by_the_window_and_the_nonce_is_forgotten() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    cache = NonceCache(capacity=2)
    verifier = make(clock, nonce_cache=cache)
    headers = signed(clock, rnd)
    verifier.verify("GET", "/api/directory", headers, b"")
    clock.advance(31)
    assert rejected(verifier, "GET", "/api/directory", headers) == "timestamp outside the window"
    # Two fresh requests fit in a cache of two: the expired nonce was dropped to make room.
    verifier.verify("GET", "/api/directory", signed(clock, rnd), b"")
    verifier.verify("GET", "/api/directory", signed(clock, rnd), b"")
    assert len(cache) == 2


def test_expired_nonces_are_dropped_as_new_ones_come_long_before_the_cache_fills() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    cache = NonceCache(capacity=1000)
    verifier = make(clock, nonce_cache=cache)
    for _ in range(3):
        verifier.verify("GET", "/api/directory", signed(clock, rnd), b"")
    clock.advance(31)
    verifier.verify("GET", "/api/directory", signed(clock, rnd), b"")
    assert len(cache) == 1


def test_a_nonce_that_expired_behind_a_live_one_makes_room_when_the_cache_is_full() -> None:
    cache = NonceCache(capacity=2)
    assert cache.add("later", expires=100.0, now=0.0) is None
    assert cache.add("sooner", expires=10.0, now=0.0) is None
    assert cache.add("sooner", expires=10.0, now=5.0) == "replayed nonce"
    assert cache.add("third", expires=120.0, now=50.0) is None  # "sooner" made room
    assert cache.add("fourth", expires=120.0, now=50.0) == "nonce cache full"


def test_a_full_cache_of_live_nonces_refuses_rather_than_forgets() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock, nonce_cache=NonceCache(capacity=1))
    verifier.verify("GET", "/api/directory", signed(clock, rnd), b"")
    assert rejected(verifier, "GET", "/api/directory", signed(clock, rnd)) == "nonce cache full"


@pytest.mark.parametrize("skew", [-31.0, 31.0, 3600.0])
def test_a_timestamp_more_than_30_seconds_off_is_refused(skew: float) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd)
    clock.advance(skew)
    assert rejected(make(clock), "GET", "/api/directory", headers) == "timestamp outside the window"


def test_a_timestamp_at_the_edge_of_the_window_is_accepted() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    headers = signed(clock, rnd)
    clock.advance(30)
    assert verifier.verify("GET", "/api/directory", headers, b"") == "alice"


def test_a_signature_accepted_before_a_restart_is_refused_by_the_next_verifier() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd)
    assert make(clock).verify("GET", "/api/directory", headers, b"") == "alice"
    clock.advance(0.001)  # the daemon restarts a millisecond later: a new, empty nonce cache
    restarted = make(clock)
    assert rejected(restarted, "GET", "/api/directory", headers) == (
        "signed before this daemon started"
    )
    assert restarted.verify("GET", "/api/directory", signed(clock, rnd), b"") == "alice"


def test_the_timestamp_is_in_milliseconds() -> None:
    clock, rnd = FixedClock(1_800_000_000.123), SeededRandom()
    assert dict(signed(clock, rnd))["X-Tunnel-Timestamp"] == "1800000000123"


@pytest.mark.parametrize(
    ("method", "target", "body"),
    [
        ("POST", "/api/directory", b""),
        ("GET", "/api/directory?a=1", b""),
        ("GET", "/api/cards", b""),
        ("GET", "/api/directory", b"x"),
    ],
)
def test_changing_method_target_or_body_breaks_the_signature(
    method: str, target: str, body: bytes
) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd)
    assert rejected(make(clock), method, target, headers, body) == "bad signature"


def test_a_changed_user_breaks_the_signature() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = [(k, "mallory" if k == "X-Tunnel-User" else v) for k, v in signed(clock, rnd)]
    assert rejected(make(clock), "GET", "/api/directory", headers) == "bad signature"


def test_a_signature_from_another_key_is_refused_and_a_key_ring_accepts_either() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd, key=OTHER)
    assert rejected(make(clock), "GET", "/api/directory", headers) == "bad signature"
    ring = TunnelVerifier([KEY.public_key(), OTHER.public_key()], clock=clock)
    assert ring.verify("GET", "/api/directory", headers, b"") == "alice"


@pytest.mark.parametrize("drop", identity_header_names())
def test_a_missing_header_is_refused(drop: str) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = [(k, v) for k, v in signed(clock, rnd) if k != drop]
    assert "missing" in rejected(make(clock), "GET", "/api/directory", headers)


def test_a_duplicated_header_is_refused_even_with_the_same_value() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd)
    headers.append(("x-tunnel-user", "alice"))
    assert "repeated" in rejected(make(clock), "GET", "/api/directory", headers)


@pytest.mark.parametrize(
    "spelling", ["X_Tunnel_User", "x-tunnel_user", "X_TUNNEL-USER", "x_tunnel_signature"]
)
def test_an_underscore_spelling_beside_a_valid_signature_is_refused(spelling: str) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = signed(clock, rnd)
    headers.append((spelling, "mallory"))
    assert "foreign spelling" in rejected(make(clock), "GET", "/api/directory", headers)


def test_case_variants_are_the_same_header() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = [(k.upper(), v) for k, v in signed(clock, rnd)]
    assert make(clock).verify("GET", "/api/directory", headers, b"") == "alice"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Tunnel-User", "al ice"),
        ("X-Tunnel-User", "-rf"),
        ("X-Tunnel-Timestamp", "12.5"),
        ("X-Tunnel-Nonce", "short"),
        ("X-Tunnel-Signature", "!" * 86),
    ],
)
def test_malformed_values_are_refused(header: str, value: str) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    headers = [(k, value if k == header else v) for k, v in signed(clock, rnd)]
    rejected(make(clock), "GET", "/api/directory", headers)


@pytest.mark.parametrize(
    "name",
    [
        "X-Tunnel-User",
        "x-tunnel-user",
        "X_Tunnel_User",
        "x-tunnel_user",
        "X-TUNNEL-SIGNATURE",
        "x_tunnel_nonce",
        "X-Tunnel-Timestamp",
        "x-tunnel-anything",
        "X-Forwarded-User",
        "x_forwarded_user",
        "Remote-User",
        b"x_tunnel_user",
        b"X-Remote-User",
        " X-Tunnel-User",
        "\tx-tunnel-mac",
        b"\xa0x-tunnel-user",  # whitespace to str.strip() once decoded as latin-1
        "\u2003x-tunnel-user",
    ],
)
def test_every_spelling_is_an_identity_header(name: str | bytes) -> None:
    assert is_identity_header(name)


@pytest.mark.parametrize(
    "name", ["Content-Type", "X-Tunnel", "Cookie", "Authorization", "X-Request-Id", "", b"host"]
)
def test_ordinary_headers_are_not_identity_headers(name: str | bytes) -> None:
    assert not is_identity_header(name)


def test_target_from_scope_joins_raw_path_and_query() -> None:
    assert (
        target_from_scope({"raw_path": b"/api/x%20y", "query_string": b"q=1"}) == "/api/x%20y?q=1"
    )
    assert target_from_scope({"raw_path": b"/api/x", "query_string": b""}) == "/api/x"
    assert target_from_scope({"path": "/healthz"}) == "/healthz"


def test_public_keys_load_from_pem_as_a_ring() -> None:
    keys = load_public_keys(public_key_pem(KEY) + public_key_pem(OTHER))
    assert len(keys) == 2
    with pytest.raises(ValueError, match="no Ed25519"):
        load_public_keys(b"nothing here")


def test_the_verifier_refuses_to_exist_without_keys() -> None:
    with pytest.raises(ValueError):
        TunnelVerifier([], clock=FixedClock())


# --------------------------------------------------------------------------- per-connection MAC

MAC_KEY = bytes(range(32))


def keyed(clock: FixedClock, rnd: SeededRandom, key: bytes = MAC_KEY) -> list[tuple[str, str]]:
    """A signed GET of /api/directory by alice, offering ``key`` for its connection."""
    now, nonce = clock.now(), rnd.token_bytes(16)
    return list(sign(KEY, "GET", "/api/directory", "alice", b"", now, nonce, mac_key=key).items())


def macd(
    clock: FixedClock,
    rnd: SeededRandom,
    key: bytes = MAC_KEY,
    *,
    user: str = "alice",
    method: str = "GET",
    target: str = "/api/directory",
    body: bytes = b"",
) -> list[tuple[str, str]]:
    return list(mac(key, method, target, user, body, clock.now(), rnd.token_bytes(16)).items())


def opened(verifier: TunnelVerifier, clock: FixedClock, rnd: SeededRandom) -> TunnelConnection:
    """A connection on which a signed request gave the daemon ``MAC_KEY``."""
    connection = TunnelConnection()
    assert verifier.verify("GET", "/api/directory", keyed(clock, rnd), b"", connection) == "alice"
    assert connection.mac_key == MAC_KEY
    return connection


def refused_on(
    verifier: TunnelVerifier,
    headers: list[tuple[str, str]],
    connection: TunnelConnection | None,
    method: str = "GET",
    target: str = "/api/directory",
    body: bytes = b"",
) -> str:
    with pytest.raises(Unauthenticated) as info:
        verifier.verify(method, target, headers, body, connection)
    assert str(info.value) == "tunnel identity not accepted"
    return info.value.rejection_reason  # type: ignore[attr-defined, no-any-return]


def test_a_signed_key_makes_the_connections_later_macs_vouch_for_their_user() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    for user in ("alice", "bob"):
        headers = macd(clock, rnd, user=user, method="POST", target="/api/x?y=1", body=b"{}")
        assert verifier.verify("POST", "/api/x?y=1", headers, b"{}", connection) == user


def test_a_mac_on_a_connection_without_a_key_or_outside_a_connection_is_refused() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    assert refused_on(verifier, macd(clock, rnd), TunnelConnection()) == (
        "MAC on a connection without a key"
    )
    assert refused_on(verifier, macd(clock, rnd), None) == "MAC on a connection without a key"


def test_a_mac_made_for_one_connection_is_refused_on_another() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    opened(verifier, clock, rnd)
    other = TunnelConnection()
    other_key = bytes(32)
    assert verifier.verify("GET", "/api/directory", keyed(clock, rnd, other_key), b"", other)
    assert refused_on(verifier, macd(clock, rnd, MAC_KEY), other) == "bad MAC"


def test_a_mac_under_a_guessed_key_is_refused() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    assert refused_on(verifier, macd(clock, rnd, b"\x01" * 32), connection) == "bad MAC"


def test_a_replayed_mac_is_refused() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    headers = macd(clock, rnd)
    assert verifier.verify("GET", "/api/directory", headers, b"", connection) == "alice"
    assert refused_on(verifier, headers, connection) == "replayed nonce"
    clock.advance(31)
    assert refused_on(verifier, headers, connection) == "timestamp outside the window"


@pytest.mark.parametrize(
    ("method", "target", "body", "user"),
    [
        ("POST", "/api/directory", b"", "alice"),
        ("GET", "/api/other", b"", "alice"),
        ("GET", "/api/directory", b"x", "alice"),
        ("GET", "/api/directory", b"", "mallory"),
    ],
)
def test_changing_method_target_body_or_user_breaks_the_mac(
    method: str, target: str, body: bytes, user: str
) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    [(name, value)] = macd(clock, rnd)
    headers = [(name, " ".join([user, *value.split(" ")[1:]]))]
    assert refused_on(verifier, headers, connection, method, target, body) == "bad MAC"


def test_a_key_the_signature_does_not_cover_is_refused_and_not_taken() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = TunnelConnection()
    plain = [*signed(clock, rnd), ("X-Tunnel-Key", "A" * 43)]
    assert refused_on(verifier, plain, connection) == "bad signature"
    swapped = [(k, "A" * 43 if k == "X-Tunnel-Key" else v) for k, v in keyed(clock, rnd)]
    assert refused_on(verifier, swapped, connection) == "bad signature"
    assert connection.mac_key is None


def test_a_replayed_key_offer_is_refused_and_installs_nothing_on_the_other_connection() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    offer = keyed(clock, rnd)
    assert verifier.verify("GET", "/api/directory", offer, b"", TunnelConnection()) == "alice"
    other = TunnelConnection()
    assert refused_on(verifier, offer, other) == "replayed nonce"
    assert other.mac_key is None


def test_a_key_offer_refused_for_its_time_installs_nothing() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    offer = keyed(clock, rnd)
    clock.advance(31)
    connection = TunnelConnection()
    assert refused_on(verifier, offer, connection) == "timestamp outside the window"
    assert connection.mac_key is None


def test_a_mac_beside_a_signature_or_a_key_or_twice_is_refused() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    beside = "X-Tunnel-Mac beside another identity header"
    for extra in (
        ("X-Tunnel-Signature", "A" * 86),
        ("X-Tunnel-Key", "A" * 43),
        ("X-Tunnel-User", "alice"),
        ("X-Tunnel-Nonce", "A" * 22),
    ):
        assert refused_on(verifier, [*macd(clock, rnd), extra], connection) == beside
    headers = macd(clock, rnd)
    twice = headers + [h for h in headers if h[0] == "X-Tunnel-Mac"]
    assert refused_on(verifier, twice, connection) == "X-Tunnel-Mac repeated"
    foreign = [("X_Tunnel_Mac" if k == "X-Tunnel-Mac" else k, v) for k, v in macd(clock, rnd)]
    assert "foreign spelling" in refused_on(verifier, foreign, connection)


def test_a_mac_from_before_the_daemon_started_is_refused() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    early = macd(clock, rnd)
    clock.advance(1)
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    assert refused_on(verifier, early, connection) == "signed before this daemon started"


def test_a_macd_request_carries_its_whole_claim_in_one_header() -> None:
    clock, rnd = FixedClock(), SeededRandom()
    [(name, value)] = macd(clock, rnd)
    user, timestamp, nonce, tag = value.split(" ")
    assert (name, user, timestamp, len(nonce), len(tag)) == (
        "X-Tunnel-Mac",
        "alice",
        "1800000000000",
        22,
        43,
    )


@pytest.mark.parametrize(
    "mangle",
    [
        lambda v: v.replace(" ", "  ", 1),  # an empty field
        lambda v: v.rsplit(" ", 1)[0],  # three fields
        lambda v: v + " extra",  # five
        lambda v: v.replace(" ", "\t", 1),
        lambda v: "al ice " + v.split(" ", 1)[1],
        lambda v: v[:-1] + "!",  # a MAC outside base64url
    ],
)
def test_a_malformed_mac_header_is_refused(mangle: Callable[[str], str]) -> None:
    clock, rnd = FixedClock(), SeededRandom()
    verifier = make(clock)
    connection = opened(verifier, clock, rnd)
    [(name, value)] = macd(clock, rnd)
    assert refused_on(verifier, [(name, mangle(value))], connection) != ""
    assert verifier.verify("GET", "/api/directory", macd(clock, rnd), b"", connection) == "alice"
