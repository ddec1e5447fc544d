"""PAM behind the privilege-separated helper, with real accounts and real PAM services."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from openbus.tunnel.pam_helper import PamClient, PamResult, spawn_helper
from tests.tunnel.conftest import ThrowawayUsers, needs_root

pytestmark = [pytest.mark.root, needs_root]


def ask(service: str, user: str, password: str, *, helper_user: str | None = None) -> PamResult:
    process, sock = spawn_helper(service, user=helper_user)

    async def once() -> PamResult:
        client = PamClient(sock)
        try:
            return await client.authenticate(user, password)
        finally:
            await client.aclose()

    try:
        return asyncio.run(once())
    finally:
        process.wait(timeout=10)


def test_the_right_password_lets_a_real_account_in(users: ThrowawayUsers, pam_service: str) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    alice = users.add(password)
    assert ask(pam_service, alice, password) == PamResult("ok")


def test_a_wrong_password_or_an_unknown_user_is_denied(
    users: ThrowawayUsers, pam_service: str
) -> None:
    alice = users.add("pw-" + secrets.token_urlsafe(12))
    assert ask(pam_service, alice, "not-the-password").outcome == "denied"
    assert ask(pam_service, "obtnobody" + secrets.token_hex(3), "whatever").outcome == "denied"


def test_a_missing_service_file_is_unavailable_not_a_fallback_to_other(
    users: ThrowawayUsers,
) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    alice = users.add(password)
    result = ask("openbus-test-missing-" + secrets.token_hex(3), alice, password)
    assert result.outcome == "unavailable"
    assert "no PAM service file" in result.detail


@pytest.fixture
def broken_service() -> Iterator[str]:
    name = "openbus-test-broken-" + secrets.token_hex(3)
    path = Path("/etc/pam.d") / name
    path.write_text("auth required pam_openbus_does_not_exist.so\naccount required pam_permit.so\n")
    try:
        yield name
    finally:
        path.unlink(missing_ok=True)


def test_a_misconfigured_service_is_unavailable_not_a_wrong_password(
    users: ThrowawayUsers, broken_service: str
) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    alice = users.add(password)
    result = ask(broken_service, alice, password)
    assert result.outcome == "unavailable"
    assert "PAM error" in result.detail


def test_a_helper_without_access_to_the_password_database_is_unavailable(
    users: ThrowawayUsers, pam_service: str
) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    alice = users.add(password)
    nobody = users.add()
    result = ask(pam_service, alice, password, helper_user=nobody)
    assert result.outcome == "unavailable"
    assert "password database" in result.detail


def test_a_dead_helper_is_unavailable(users: ThrowawayUsers, pam_service: str) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    alice = users.add(password)
    process, sock = spawn_helper(pam_service)
    process.kill()
    process.wait(timeout=10)

    async def twice() -> tuple[PamResult, PamResult]:
        client = PamClient(sock)
        try:
            return await client.authenticate(alice, password), await client.authenticate(
                alice, password
            )
        finally:
            await client.aclose()

    first, second = asyncio.run(twice())
    assert first == PamResult("unavailable", "the PAM helper is not running")
    assert second.outcome == "unavailable"
