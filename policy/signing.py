"""Detached Ed25519 signatures over the exact bytes of a policy file.

Theory of operation
-------------------
The org admin holds an Ed25519 private key (PEM, PKCS#8, unencrypted, mode 0600); every box
pins the matching public key (PEM, SubjectPublicKeyInfo). ``sign`` writes ``POLICY.sig`` next
to the policy: one line, the base64 of the 64-byte raw signature over the file's bytes exactly
as they are (no canonicalisation: what was signed is what is parsed).

Verification reads the policy bytes once, verifies *those* bytes against every pinned key (a
key ring, so an org can rotate: pin old and new, re-sign, then unpin the old), and returns the
bytes and which key matched, so the caller parses exactly what was verified. Every failure
(missing or unreadable signature, bad base64, wrong length, unpinned key, tampered bytes)
raises the one opaque ``PolicySignatureError``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from openbus.kernel.errors import ConfigError
from openbus.policy.errors import PolicyKeyError, PolicySignatureError

SIGNATURE_SUFFIX = ".sig"
SIGNATURE_BYTES = 64
MAX_POLICY_BYTES = 1024 * 1024  # a policy is a few kilobytes; refuse to read a huge file


def signature_path(policy_path: Path) -> Path:
    """``POLICY.sig``: the policy's path with ``.sig`` appended."""
    return policy_path.with_name(policy_path.name + SIGNATURE_SUFFIX)


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short, stable fingerprint of a public key (never of a private one)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


# --------------------------------------------------------------------------- keys


def generate_keypair() -> tuple[bytes, bytes]:
    """A fresh key pair as (private PEM, public PEM)."""
    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, public_pem


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask said
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_keypair(private_path: Path, public_path: Path) -> str:
    """Generate a key pair into two new files; refuse to overwrite. Returns the key id."""
    if private_path.resolve() == public_path.resolve():
        raise PolicyKeyError("the private and public key files must differ", path=str(public_path))
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise PolicyKeyError("already exists; refusing to overwrite a key", path=str(path))
    private_pem, public_pem = generate_keypair()
    try:
        _write_new(private_path, private_pem, 0o600)
    except FileExistsError:
        raise PolicyKeyError(
            "already exists; refusing to overwrite a key", path=str(private_path)
        ) from None
    except OSError as exc:
        raise PolicyKeyError(f"cannot write: {exc.strerror}", path=str(private_path)) from None
    try:
        _write_new(public_path, public_pem, 0o644)
    except OSError as exc:
        private_path.unlink(missing_ok=True)
        if isinstance(exc, FileExistsError):
            raise PolicyKeyError(
                "already exists; refusing to overwrite a key", path=str(public_path)
            ) from None
        raise PolicyKeyError(f"cannot write: {exc.strerror}", path=str(public_path)) from None
    return key_id(load_public_key(public_path))


def _read_key_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise PolicyKeyError("no such key file", path=str(path)) from None
    except OSError as exc:
        raise PolicyKeyError(f"cannot read: {exc.strerror}", path=str(path)) from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise PolicyKeyError(
            "not an unencrypted PEM (PKCS#8) private key", path=str(path)
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise PolicyKeyError("not an Ed25519 private key", path=str(path))
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise PolicyKeyError(
            "not a PEM (SubjectPublicKeyInfo) public key", path=str(path)
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise PolicyKeyError("not an Ed25519 public key", path=str(path))
    return key


def load_public_keys(paths: Sequence[Path]) -> tuple[Ed25519PublicKey, ...]:
    if not paths:
        raise PolicyKeyError("no org public key is pinned", path="[policy] org_public_key")
    return tuple(load_public_key(p) for p in paths)


# --------------------------------------------------------------------------- signatures


def sign_bytes(data: bytes, private_key: Ed25519PrivateKey) -> bytes:
    """The content of a ``.sig`` file for ``data``: base64 of the raw signature, one line."""
    return base64.b64encode(private_key.sign(data)) + b"\n"


def write_signature(policy_path: Path, data: bytes, private_key: Ed25519PrivateKey) -> Path:
    """Sign ``data`` (the policy's bytes) and write ``POLICY.sig`` atomically."""
    target = signature_path(policy_path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        _write_new(tmp, sign_bytes(data, private_key), 0o644)
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PolicyKeyError(f"cannot write: {exc.strerror}", path=str(target)) from None
    return target


def verify_bytes(
    data: bytes, signature_text: bytes, public_keys: Sequence[Ed25519PublicKey]
) -> Ed25519PublicKey | None:
    """The pinned key whose signature ``signature_text`` is over ``data``, or None."""
    try:
        raw = base64.b64decode(signature_text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != SIGNATURE_BYTES:
        return None
    for key in public_keys:
        try:
            key.verify(raw, data)
        except InvalidSignature:
            continue
        return key
    return None


@dataclass(frozen=True)
class Verified:
    """Policy bytes whose signature verified, and the id of the key that signed them."""

    data: bytes
    key_id: str


def _read_limited(path: Path) -> bytes:
    with path.open("rb") as handle:
        data = handle.read(MAX_POLICY_BYTES + 1)
    if len(data) > MAX_POLICY_BYTES:
        raise OSError(0, "too large")
    return data


def verify_file(policy_path: Path, public_keys: Sequence[Ed25519PublicKey]) -> Verified:
    """Read ``policy_path`` once and check ``POLICY.sig`` over those bytes. Fails closed."""
    sig_path = signature_path(policy_path)
    failure = PolicySignatureError(str(policy_path), str(sig_path))
    if not public_keys:
        raise failure
    try:
        data = _read_limited(policy_path)
    except FileNotFoundError:
        raise ConfigError("no such policy file", path=str(policy_path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(policy_path)) from None
    try:
        signature_text = _read_limited(sig_path)
    except OSError:
        raise failure from None
    key = verify_bytes(data, signature_text, public_keys)
    if key is None:
        raise failure
    return Verified(data=data, key_id=key_id(key))
