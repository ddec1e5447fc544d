"""Detached Ed25519 signatures: exact bytes, pinned keys, one opaque failure."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from openbus.policy.errors import PolicyKeyError, PolicySignatureError
from openbus.policy.signing import (
    load_public_key,
    load_public_keys,
    signature_path,
    verify_file,
    write_keypair,
)
from tests.policy.conftest import OrgKeys, SignedWriter, make_keys, policy_text


def test_a_signed_policy_verifies_and_returns_the_exact_bytes(
    write_signed: SignedWriter, org_keys: OrgKeys
) -> None:
    path = write_signed(policy_text())
    verified = verify_file(path, load_public_keys([org_keys.public]))
    assert verified.data == path.read_bytes()
    assert verified.key_id.startswith("ed25519:")
    assert signature_path(path) == path.with_name("policy.toml.sig")


def test_one_tampered_byte_fails_verification(
    write_signed: SignedWriter, org_keys: OrgKeys
) -> None:
    path = write_signed(policy_text())
    path.write_bytes(path.read_bytes().replace(b'"observe"', b'"collaborate"', 1))
    with pytest.raises(PolicySignatureError):
        verify_file(path, load_public_keys([org_keys.public]))


def test_even_trailing_whitespace_counts_as_tampering(
    write_signed: SignedWriter, org_keys: OrgKeys
) -> None:
    path = write_signed(policy_text())
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(PolicySignatureError):
        verify_file(path, load_public_keys([org_keys.public]))


def test_a_signature_by_another_key_fails(write_signed: SignedWriter, tmp_path: Path) -> None:
    intruder = make_keys(tmp_path / "intruder", "intruder")
    pinned = make_keys(tmp_path / "pinned", "pinned")
    path = write_signed(policy_text(), keys=intruder)
    with pytest.raises(PolicySignatureError):
        verify_file(path, load_public_keys([pinned.public]))


def test_a_missing_signature_fails(write_signed: SignedWriter, org_keys: OrgKeys) -> None:
    path = write_signed(policy_text())
    signature_path(path).unlink()
    with pytest.raises(PolicySignatureError):
        verify_file(path, load_public_keys([org_keys.public]))


@pytest.mark.parametrize(
    "garbage",
    [b"", b"not base64 at all!", base64.b64encode(b"x" * 63), base64.b64encode(b"x" * 64)],
)
def test_malformed_signatures_fail(
    write_signed: SignedWriter, org_keys: OrgKeys, garbage: bytes
) -> None:
    path = write_signed(policy_text())
    signature_path(path).write_bytes(garbage)
    with pytest.raises(PolicySignatureError):
        verify_file(path, load_public_keys([org_keys.public]))


def test_every_signature_failure_reads_the_same(
    write_signed: SignedWriter, org_keys: OrgKeys, tmp_path: Path
) -> None:
    keys = load_public_keys([org_keys.public])
    path = write_signed(policy_text())
    good = path.read_bytes()
    messages = set()

    path.write_bytes(good + b"#")
    with pytest.raises(PolicySignatureError) as tampered:
        verify_file(path, keys)
    messages.add(tampered.value.message)
    path.write_bytes(good)
    signature_path(path).write_bytes(b"!!")
    with pytest.raises(PolicySignatureError) as garbled:
        verify_file(path, keys)
    messages.add(garbled.value.message)
    signature_path(path).unlink()
    with pytest.raises(PolicySignatureError) as missing:
        verify_file(path, keys)
    messages.add(missing.value.message)

    assert len(messages) == 1
    (message,) = messages
    assert str(path) in message and str(signature_path(path)) in message


def test_a_key_ring_accepts_either_pinned_key_during_rotation(
    write_signed: SignedWriter, tmp_path: Path
) -> None:
    old = make_keys(tmp_path / "old", "old")
    new = make_keys(tmp_path / "new", "new")
    ring = load_public_keys([old.public, new.public])
    path = write_signed(policy_text(), keys=old)
    by_old = verify_file(path, ring).key_id
    path = write_signed(policy_text(), keys=new)
    by_new = verify_file(path, ring).key_id
    assert by_old != by_new
    with pytest.raises(PolicySignatureError):
        verify_file(path, load_public_keys([old.public]))


def test_keygen_writes_a_private_key_only_its_owner_can_read(tmp_path: Path) -> None:
    old_umask = os.umask(0)  # even under the most permissive umask
    try:
        keys = make_keys(tmp_path)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(keys.private.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in keys.private.read_bytes()
    assert b"PUBLIC KEY" in keys.public.read_bytes()
    load_public_key(keys.public)


def test_keygen_refuses_to_overwrite_either_file(tmp_path: Path) -> None:
    keys = make_keys(tmp_path)
    before = keys.private.read_bytes(), keys.public.read_bytes()
    with pytest.raises(PolicyKeyError, match="refusing to overwrite"):
        write_keypair(keys.private, tmp_path / "other.pub")
    with pytest.raises(PolicyKeyError, match="refusing to overwrite"):
        write_keypair(tmp_path / "other.pem", keys.public)
    assert (keys.private.read_bytes(), keys.public.read_bytes()) == before
    assert not (tmp_path / "other.pub").exists() and not (tmp_path / "other.pem").exists()


def test_a_public_key_file_that_is_not_ed25519_is_refused_naming_the_file(tmp_path: Path) -> None:
    bogus = tmp_path / "org.pub"
    bogus.write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(PolicyKeyError) as caught:
        load_public_key(bogus)
    assert str(bogus) in caught.value.message


def test_a_private_key_is_not_accepted_as_the_pinned_public_key(org_keys: OrgKeys) -> None:
    with pytest.raises(PolicyKeyError) as caught:
        load_public_key(org_keys.private)
    assert "BEGIN" not in caught.value.message  # no key material in the error
