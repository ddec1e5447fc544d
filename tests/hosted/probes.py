"""What one hosted user tries; run as that user in a subprocess (``python -m tests.hosted.probes``).

Each probe takes one JSON argument and prints one JSON result, so the test (root) decides and
asserts and the probe only reports what the kernel and the daemon answered.

* ``read {"paths": [...]}``: open and read each path; ``"ok"`` or the exception's class name.
* ``connect {"socket": path}``: connect to a unix socket; ``"ok"`` or the class name.
* ``tcp {"port": n, "cases": [{"path", "headers": [[name, value], ...]}]}``: one request each
  to 127.0.0.1; the status codes.
* ``signed {"socket", "key", "requests": [{"method", "path", "user", "body", "sent",
  "times"}]}``: sign each request with the tunnel's key (over ``body``), send ``sent`` (the
  body as sent, by default ``body``) ``times`` times with the same signature; the statuses.
* ``sign {"key", "method", "path", "user"}``: the tunnel's headers for one bodiless request,
  not sent (what someone who captured a signed request holds).
* ``send {"socket", "method", "path", "headers"}``: that request sent as is; the status.
* ``keyed {"socket", "key", "user", "steps": [[connection, how], ...]}``: GET /api/directory
  on numbered raw connections (never silently reopened), each vouched for as ``how`` says:
  ``"sign:K"`` signed offering MAC key K (a name; its bytes are made once), ``"mac:K"``
  MAC'd under K, ``"again"`` the previous step's exact headers once more; the statuses
  (``"closed"`` when the daemon had hung up).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import time
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openbus.kernel.tunnel_signature import mac, sign


def _outcome(exc: BaseException | None) -> str:
    return "ok" if exc is None else type(exc).__name__


def read(args: dict[str, Any]) -> dict[str, str]:
    results: dict[str, str] = {}
    for path in args["paths"]:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as exc:
            results[path] = _outcome(exc)
        else:
            results[path] = "ok"
    return results


def connect(args: dict[str, Any]) -> str:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(args["socket"])
    except OSError as exc:
        return _outcome(exc)
    finally:
        sock.close()
    return "ok"


def tcp(args: dict[str, Any]) -> list[int]:
    statuses: list[int] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{args['port']}", timeout=10) as client:
        for case in args["cases"]:
            headers = [(name, value) for name, value in case["headers"]]
            statuses.append(client.get(case["path"], headers=headers).status_code)
    return statuses


def signed(args: dict[str, Any]) -> list[list[int]]:
    key = _tunnel_key(args["key"])
    transport = httpx.HTTPTransport(uds=args["socket"])
    results: list[list[int]] = []
    with httpx.Client(transport=transport, base_url="http://openbus", timeout=10) as client:
        for request in args["requests"]:
            body = request.get("body", "").encode()
            sent = request.get("sent", request.get("body", "")).encode()
            headers = sign(
                key,
                request["method"],
                request["path"],
                request["user"],
                body,
                time.time(),
                os.urandom(16),
            )
            if sent:  # the human API reads JSON bodies only (the tunnel forwards the type)
                headers = {**headers, "content-type": "application/json"}
            results.append(
                [
                    client.request(
                        request["method"], request["path"], headers=headers, content=sent
                    ).status_code
                    for _ in range(request.get("times", 1))
                ]
            )
    return results


def _tunnel_key(path: str) -> Ed25519PrivateKey:
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def sign_only(args: dict[str, Any]) -> dict[str, str]:
    key = _tunnel_key(args["key"])
    return sign(key, args["method"], args["path"], args["user"], b"", time.time(), os.urandom(16))


def send(args: dict[str, Any]) -> int:
    transport = httpx.HTTPTransport(uds=args["socket"])
    with httpx.Client(transport=transport, base_url="http://openbus", timeout=10) as client:
        return client.request(args["method"], args["path"], headers=args["headers"]).status_code


class _Unix(http.client.HTTPConnection):
    auto_open = 0  # a connection the daemon closed stays closed: no silent new one

    def __init__(self, path: str) -> None:
        super().__init__("openbus", timeout=10)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)


def keyed(args: dict[str, Any]) -> list[int | str]:
    private = _tunnel_key(args["key"])
    keys: dict[str, bytes] = {}
    connections: dict[int, _Unix] = {}
    statuses: list[int | str] = []
    headers: dict[str, str] = {}
    for number, how in args["steps"]:
        kind, _, name = how.partition(":")
        key = keys.setdefault(name, os.urandom(32)) if name else b""
        now, nonce = time.time(), os.urandom(16)
        if kind == "sign":
            headers = sign(
                private, "GET", "/api/directory", args["user"], b"", now, nonce, mac_key=key
            )
        elif kind == "mac":
            headers = mac(key, "GET", "/api/directory", args["user"], b"", now, nonce)
        connection = connections.get(number) or connections.setdefault(
            number, _Unix(args["socket"])
        )
        try:
            connection.request("GET", "/api/directory", headers=headers)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        except (http.client.HTTPException, OSError):
            statuses.append("closed")
    for connection in connections.values():
        connection.close()
    return statuses


PROBES = {
    "read": read,
    "connect": connect,
    "tcp": tcp,
    "signed": signed,
    "sign": sign_only,
    "send": send,
    "keyed": keyed,
}


def main() -> None:
    probe = PROBES[sys.argv[1]]
    print(json.dumps(probe(json.loads(sys.argv[2]))))


if __name__ == "__main__":
    main()
