"""Helpers for the audit tests: audited actions through the real daemon, tampering copies."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.support.daemon import RunningDaemon


def audited_burst(daemon: RunningDaemon, count: int, concurrency: int = 8) -> int:
    """Run ``count`` audited reads (``GET /api/audit``) on the human API; return how many
    answered 200."""

    def worker(n: int) -> int:
        ok = 0
        with daemon.human(timeout=30) as client:
            for _ in range(n):
                response = client.get("/api/audit", params={"after": 10**12, "limit": 1})
                ok += response.status_code == 200
        return ok

    shares = [
        count // concurrency + (1 if i < count % concurrency else 0) for i in range(concurrency)
    ]
    with ThreadPoolExecutor(concurrency) as pool:
        return sum(pool.map(worker, shares))


def head_seq(daemon: RunningDaemon) -> int:
    with daemon.human() as client:
        return int(client.get("/healthz").json()["audit"]["seq"])


def health(daemon: RunningDaemon) -> dict[str, object]:
    with daemon.human() as client:
        body = client.get("/healthz").json()
    audit = body["audit"]
    assert isinstance(audit, dict)
    return audit
