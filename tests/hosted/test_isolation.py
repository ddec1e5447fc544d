"""Hosted isolation with real users: what the agent, the tunnel and people at the desk can do.

The box (``conftest.box``) runs the real daemon as its own user; every attempt below runs in
a subprocess as the user who makes it, so the kernel (file modes, ACLs, SO_PEERCRED, ptrace
rules) and the daemon decide, never the test's root.
"""

from __future__ import annotations

import grp
import json
import pwd
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon import audit_export as audit_service
from openbus.daemon import socket_acl
from openbus.daemon.launch_proc import process_tree
from openbus.daemon.socket_acl import EXECUTE, GROUP, GROUP_OBJ, MASK, OTHER, READ, USER, WRITE
from tests.hosted.conftest import HostedBox, as_user, mcp_initialize, needs_root, probe
from tests.support.daemon import python_for
from tests.support.wait import wait_until
from tests.tunnel.conftest import start_tunnel, stop_tunnel

pytestmark = [pytest.mark.root, needs_root]

FAKE_SIGNATURE = [
    ("X-Tunnel-User", "root"),
    ("X-Tunnel-Timestamp", "1796000000"),
    ("X-Tunnel-Nonce", "A" * 22),
    ("X-Tunnel-Signature", "B" * 86),
]
SPELLINGS: list[list[tuple[str, str]]] = [
    [("X-Tunnel-User", "root")],
    [("x-tunnel-user", "root")],
    [("X_Tunnel_User", "root")],
    [("x_tunnel_user", "root")],
    [("X-Tunnel-User", "root"), ("X-Tunnel-User", "root")],
    [("X-Tunnel-User", "alice"), ("x_tunnel_user", "root")],
    FAKE_SIGNATURE,
    [("X_Tunnel_User", "root"), *FAKE_SIGNATURE[1:]],
]


def audit_after(box: HostedBox, seq: int) -> list[dict[str, Any]]:
    """Records after ``seq``, read by root at the desk (its own read is audited too)."""
    with box.daemon.human() as desk:
        response = desk.get("/api/audit", params={"after": seq, "limit": audit_service.MAX_READ})
    assert response.status_code == 200, response.text
    records: list[dict[str, Any]] = response.json()["records"]
    return records


def audit_head(box: HostedBox) -> int:
    records = audit_after(box, 0)
    return int(records[-1]["seq"]) if records else 0


def refusals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["action"] == "identity.refused"]


# --------------------------------------------------------------------------- 1. forged identity


def test_a_forged_tunnel_identity_over_tcp_is_refused_and_audited_in_every_spelling(
    box: HostedBox,
) -> None:
    before = audit_head(box)
    paths = ["/api/directory", "/mcp", "/healthz"]
    cases = [{"path": path, "headers": headers} for path in paths for headers in SPELLINGS]
    control = {"path": "/healthz", "headers": []}
    statuses = probe(box.agent_user, "tcp", {"port": box.daemon.port, "cases": [*cases, control]})
    assert statuses[-1] == 200, "the agent user reaches the agents' port at all"
    assert statuses[:-1] == [401] * len(cases)
    refused = refusals(audit_after(box, before))
    assert len(refused) == len(cases)
    assert {r["details"]["peer"] for r in refused} == {"tcp"}
    assert {r["outcome"] for r in refused} == {"refused"}
    seen = {name for r in refused for name in r["details"]["headers"]}
    assert {"x-tunnel-user", "x_tunnel_user", "x-tunnel-signature"} <= seen
    assert {r["target"] for r in refused} == set(paths)


def test_only_the_tunnel_and_the_operators_can_open_the_daemon_socket(box: HostedBox) -> None:
    socket = str(box.daemon.socket_path)
    who = {
        "agent": box.agent_user,
        "outsider": box.outsider,
        "tunnel": box.tunnel_user,
        "operator": box.operator,
    }
    results = {role: probe(user, "connect", {"socket": socket}) for role, user in who.items()}
    assert results == {
        "agent": "PermissionError",
        "outsider": "PermissionError",
        "tunnel": "ok",
        "operator": "ok",
    }


def test_the_socket_carries_exactly_the_tunnels_and_the_operators_grants(box: HostedBox) -> None:
    tunnel_uid = pwd.getpwnam(box.tunnel_user).pw_uid
    operators_gid = grp.getgrnam(box.operators_group).gr_gid
    on_socket = {(e.tag, e.qualifier): e.perm for e in socket_acl.read_acl(box.daemon.socket_path)}
    undefined = socket_acl.UNDEFINED_ID
    assert on_socket[(USER, tunnel_uid)] == READ | WRITE
    assert on_socket[(GROUP, operators_gid)] == READ | WRITE
    assert on_socket[(GROUP_OBJ, undefined)] == 0
    assert on_socket[(OTHER, undefined)] == 0
    assert on_socket[(MASK, undefined)] == READ | WRITE
    assert [k for k in on_socket if k[0] in (USER, GROUP)] == [
        (USER, tunnel_uid),
        (GROUP, operators_gid),
    ]
    on_dir = {
        (e.tag, e.qualifier): e.perm for e in socket_acl.read_acl(box.daemon.socket_path.parent)
    }
    assert on_dir[(USER, tunnel_uid)] == EXECUTE
    assert on_dir[(GROUP, operators_gid)] == EXECUTE
    assert on_dir[(OTHER, undefined)] == 0


# --------------------------------------------------------------------------- 2. secrets


def test_the_agent_user_cannot_read_the_credential_the_state_the_audit_key_or_the_environment(
    box: HostedBox,
) -> None:
    state = box.daemon.state_dir
    secrets = [box.credential, state / "openbus.db", state / "audit_key.pem"]
    assert all(path.exists() for path in secrets)
    environs = [f"/proc/{pid}/environ" for pid in box.worker_pids()]
    assert len(environs) == 2, "the gunicorn arbiter and its one worker"
    readable = str(box.daemon.config_path)  # world-readable: the probe itself works
    paths = [*map(str, secrets), *environs, readable]
    results = probe(box.agent_user, "read", {"paths": paths})
    assert results == {**dict.fromkeys(paths[:-1], "PermissionError"), readable: "ok"}


def test_the_daemon_runs_as_its_own_user_without_root(box: HostedBox) -> None:
    uid = pwd.getpwnam(box.daemon_user).pw_uid
    for pid in box.worker_pids():
        status = Path(f"/proc/{pid}/status").read_text()
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert uids == [str(uid)] * 4


# --------------------------------------------------------------------------- 3. the tunnel


def test_a_replayed_signed_request_is_refused_and_audited(box: HostedBox) -> None:
    before = audit_head(box)
    request = {"method": "GET", "path": "/api/directory", "user": box.operator, "times": 2}
    statuses = probe(
        box.tunnel_user,
        "signed",
        {"socket": str(box.daemon.socket_path), "key": str(box.credential), "requests": [request]},
    )
    assert statuses == [[200, 401]]
    records = audit_after(box, before)
    served = [r for r in records if r["action"] == "directory.list"]
    assert [r["actor"] for r in served] == [f"human:{box.operator}"]
    refused = refusals(records)
    assert len(refused) == 1
    assert "replayed nonce" in refused[0]["details"]["peer"]
    assert "(tunnel)" in refused[0]["details"]["peer"]


def test_a_mac_vouches_only_on_the_connection_whose_signed_request_gave_its_key(
    box: HostedBox,
) -> None:
    steps = [
        [1, "mac:A"],  # no key given yet: refused
        [1, "sign:A"],  # signed, giving key A to connection 1
        [1, "mac:A"],
        [1, "again"],  # the same MAC'd request replayed
        [1, "mac:forged"],  # a key nobody gave the daemon
        [2, "mac:A"],  # A on another connection
        [2, "sign:B"],
        [2, "mac:A"],  # ... which now has a key of its own
        [2, "mac:B"],
        [1, "mac:A"],  # connection 1 still has A, refusals did not cost it
    ]
    before = audit_head(box)
    args = {"socket": str(box.daemon.socket_path), "key": str(box.credential)}
    statuses = probe(box.tunnel_user, "keyed", {**args, "user": box.operator, "steps": steps})
    assert statuses == [401, 200, 200, 401, 401, 401, 200, 401, 200, 200]
    records = audit_after(box, before)
    served = [r for r in records if r["action"] == "directory.list"]
    assert [r["actor"] for r in served] == [f"human:{box.operator}"] * 5
    reasons = " | ".join(r["details"]["peer"] for r in refusals(records))
    for reason in ("MAC on a connection without a key", "replayed nonce", "bad MAC"):
        assert reason in reasons


def test_a_signed_request_captured_before_a_restart_is_refused_after_it_and_audited(
    box: HostedBox,
) -> None:
    request = {"method": "GET", "path": "/api/directory", "user": box.operator}
    headers = probe(box.tunnel_user, "sign", {"key": str(box.credential), **request})
    replay = {"socket": str(box.daemon.socket_path), "headers": headers, **request}
    assert probe(box.tunnel_user, "send", replay) == 200
    box.restart_daemon()  # well within the signature's 30 s window; the nonce cache is new
    before = audit_head(box)
    assert probe(box.tunnel_user, "send", replay) == 401
    refused = refusals(audit_after(box, before))
    assert len(refused) == 1
    assert "signed before this daemon started" in refused[0]["details"]["peer"]
    fresh = {"socket": str(box.daemon.socket_path), "key": str(box.credential)}
    assert probe(box.tunnel_user, "signed", {**fresh, "requests": [request]}) == [[200]]


def test_a_signed_request_whose_body_was_altered_is_refused(box: HostedBox) -> None:
    before = audit_head(box)
    body = json.dumps({"to": "%0", "text": "hello"})
    altered = json.dumps({"to": "%0", "text": "rm -rf ~"})
    requests = [
        {"method": "POST", "path": "/api/messages", "user": box.operator, "body": body},
        {
            "method": "POST",
            "path": "/api/messages",
            "user": box.operator,
            "body": body,
            "sent": altered,
        },
    ]
    statuses = probe(
        box.tunnel_user,
        "signed",
        {"socket": str(box.daemon.socket_path), "key": str(box.credential), "requests": requests},
    )
    assert statuses[0][0] != 401, "the unaltered request passes the identity check"
    assert statuses[1] == [401]
    refused = refusals(audit_after(box, before))
    assert len(refused) == 1
    assert "bad signature" in refused[0]["details"]["peer"]


# --------------------------------------------------------------------------- 4./5. the desk


def test_the_daemon_sees_the_agent_users_panes_through_server_access(box: HostedBox) -> None:
    made = box.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "sleep 600")
    assert made.returncode == 0, made.stderr
    pane = made.stdout.strip()

    def listed() -> bool:
        with box.daemon.human() as desk:
            panes = desk.get("/api/directory").json()["panes"]
        return any(p["pane"] == pane for p in panes)

    wait_until(listed, timeout=15, what=f"pane {pane} of the agent user in the directory")
    with box.daemon.human() as desk:
        panes = desk.get("/api/directory").json()["panes"]
    in_home = [p for p in panes if p["cwd"] == str(box.root / "agent-home")]
    assert in_home, "the session's first pane, in the agent user's home"
    assert [p["branch"] for p in in_home] == [None]  # a 0700 home the daemon cannot look into


def test_an_operator_at_the_desk_reads_the_directory_as_themselves(box: HostedBox) -> None:
    before = audit_head(box)
    python, env = python_for(box.operator)
    argv = [python, "-m", "openbus.daemon.cli", "directory", "--json"]
    done = as_user(box.operator, [*argv, "--config", str(box.daemon.config_path)], env=dict(env))
    assert done.returncode == 0, done.stderr
    panes = json.loads(done.stdout)["panes"]
    assert any(p["session"] == "agents" for p in panes)
    served = [r for r in audit_after(box, before) if r["action"] == "directory.list"]
    assert [r["actor"] for r in served] == [f"human:{box.operator}"]


def test_someone_outside_the_operators_group_cannot_reach_the_daemon(box: HostedBox) -> None:
    python, env = python_for(box.outsider)
    argv = [python, "-m", "openbus.daemon.cli", "directory"]
    done = as_user(box.outsider, [*argv, "--config", str(box.daemon.config_path)], env=dict(env))
    assert done.returncode != 0
    assert "cannot reach the daemon" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_operator_claiming_another_identity_on_the_socket_is_refused_and_audited(
    box: HostedBox,
) -> None:
    before = audit_head(box)
    code = (
        "import httpx, sys\n"
        "t = httpx.HTTPTransport(uds=sys.argv[1])\n"
        "with httpx.Client(transport=t, base_url='http://openbus') as c:\n"
        "    h = [('X-Tunnel-User', 'root'), ('x_tunnel_user', 'root')]\n"
        "    print(c.get('/api/directory', headers=h).status_code)\n"
    )
    python, env = python_for(box.operator)
    done = as_user(box.operator, [python, "-c", code, str(box.daemon.socket_path)], env=dict(env))
    assert done.stdout.strip() == "401", done.stderr
    refused = refusals(audit_after(box, before))
    assert len(refused) == 1
    assert refused[0]["details"]["peer"].startswith(f"uid {pwd.getpwnam(box.operator).pw_uid} ")


# --------------------------------------------------------------------------- through the tunnel


def test_a_person_signs_in_through_the_real_tunnel_and_is_the_actor(
    box: HostedBox, pam_service: str
) -> None:
    """No chmod, no chgrp: the tunnel (no supplementary groups) reaches the socket through the
    ACLs the daemon set, as it would under systemd."""
    password = "pw-" + secrets.token_urlsafe(12)
    person = box.accounts.user()
    subprocess.run(["chpasswd"], input=f"{person}:{password}\n", text=True, check=True)
    before = audit_head(box)
    tunnel = start_tunnel(
        box.root / "tunnel",
        daemon_socket=box.daemon.socket_path,
        pam_service=pam_service,
        run_as=box.tunnel_user,
    )
    try:
        with tunnel.client() as client:
            assert tunnel.login(client, person, password).status_code == 303
            response = client.get("/api/directory")
    finally:
        stop_tunnel(tunnel)
    assert response.status_code == 200, response.text
    served = [r for r in audit_after(box, before) if r["action"] == "directory.list"]
    assert [r["actor"] for r in served] == [f"human:{person}"]


def test_an_operator_launches_a_connected_agent_into_the_agents_server_under_a_pool_user(
    box: HostedBox,
) -> None:
    python, env = python_for(box.operator)
    argv = [python, "-m", "openbus.daemon.cli", "launch", "fakeclaude", "--preset", "observe"]
    argv += ["--cwd", "/tmp", "--json", "--config", str(box.daemon.config_path)]
    done = as_user(box.operator, argv, env=dict(env))
    assert done.returncode == 0, done.stderr
    launched = json.loads(done.stdout)
    assert launched["connect"]["connected"], launched
    assert launched["agent_user"] in box.pool_users
    uid = pwd.getpwnam(launched["agent_user"]).pw_uid

    def harness() -> int | None:
        for pid in process_tree(int(launched["pid"])):
            status = Path(f"/proc/{pid}/status").read_text()
            uids = next(line for line in status.splitlines() if line.startswith("Uid:"))
            if (
                uids.split()[1:] == [str(uid)] * 4
                and b"OPENBUS_TOKEN=" in Path(f"/proc/{pid}/environ").read_bytes()
            ):
                return pid
        return None

    pid = wait_until(harness, timeout=15, what="the harness to run as its pool user")
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    token = next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"OPENBUS_TOKEN="))
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert token.encode() not in cmdline.read_bytes()
        except OSError:
            continue  # a process that ended while we looked
    assert mcp_initialize(box, token) == 200  # the token works on the agents' port
