"""``openbus-tunnel``: ``serve`` the tunnel, or ``init`` its secrets (used by deploy/install)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import ipaddress
import os
import socket
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from openbus.kernel.clock import SystemRandom
from openbus.kernel.errors import OpenbusError
from openbus.kernel.tunnel_signature import public_key_pem
from openbus.tunnel.config import load_tunnel_config
from openbus.tunnel.session import new_key_ring_line


def _write_new(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` with ``mode`` unless it exists (idempotent); True when written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return True


def self_signed(hostname: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    alt: list[x509.GeneralName] = [
        x509.DNSName(hostname),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def init_secrets(
    config_path: Path | None, public_key: Path, hostname: str, root: Path = Path("/")
) -> list[str]:
    """Create the missing secrets the config names (under ``root``, for image builds)."""
    loaded = load_tunnel_config(config_path)

    def under(path: Path) -> Path:
        return root / path.relative_to("/") if path.is_absolute() else path

    config = dataclasses.replace(
        loaded,
        credential=under(loaded.credential),
        cookie_key=under(loaded.cookie_key),
        tls_cert=under(loaded.tls_cert),
        tls_key=under(loaded.tls_key),
    )
    public_key = under(public_key)
    made = []
    if not config.credential.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        _write_new(config.credential, pem, 0o400)
        public_key.unlink(missing_ok=True)
        _write_new(public_key, public_key_pem(key), 0o444)
        made += [str(config.credential), str(public_key)]
    if _write_new(config.cookie_key, new_key_ring_line(SystemRandom()).encode("ascii"), 0o400):
        made.append(str(config.cookie_key))
    if not config.tls_cert.exists() and not config.tls_key.exists():
        cert, key_pem = self_signed(hostname)
        _write_new(config.tls_key, key_pem, 0o400)
        _write_new(config.tls_cert, cert, 0o444)
        made += [str(config.tls_cert), str(config.tls_key)]
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="openbus-tunnel", description="The openbus tunnel client."
    )
    sub = parser.add_subparsers(dest="verb", required=True)
    serve = sub.add_parser("serve", help="serve HTTPS: login, sessions, the signing proxy")
    serve.add_argument(
        "--config", type=Path, help="tunnel config (default /etc/openbus/tunnel.toml)"
    )
    init = sub.add_parser(
        "init", help="create the missing secrets named in the config (idempotent)"
    )
    init.add_argument("--config", type=Path)
    init.add_argument(
        "--public-key", type=Path, required=True, help="where the daemon reads the public key"
    )
    init.add_argument(
        "--hostname", default=socket.getfqdn(), help="name in the self-signed certificate"
    )
    init.add_argument(
        "--root", type=Path, default=Path("/"), help="create the files under this root"
    )
    args = parser.parse_args(argv)
    try:
        if args.verb == "init":
            for path in init_secrets(args.config, args.public_key, args.hostname, args.root):
                print(f"created {path}")
            return 0
        # Serving loads uvicorn and TLS; `init` needs none of it.
        from openbus.tunnel.server import serve as run  # noqa: PLC0415 - start-up cost

        run(load_tunnel_config(args.config))
    except OpenbusError as exc:
        print(f"openbus-tunnel: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
