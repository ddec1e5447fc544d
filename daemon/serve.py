"""``openbus serve``: gunicorn, one worker, the ASGI app, both listeners.

One worker, because the message queues, send locks and pending cards live in one process.
The config path travels to the worker in ``OPENBUS_CONFIG``; the worker loads it again, so a
bad file is reported here first, before gunicorn starts, as one line naming key and file
(``preflight`` also reads what the worker would fail on: the policy, the OTLP headers file,
the tunnel's key).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import resource
import socket
import sys
from pathlib import Path

from openbus.daemon import socket_acl, web_access
from openbus.daemon.audit.shipper import read_headers_file
from openbus.daemon.audit_export import export_settings
from openbus.daemon.config import Config
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.daemon.tunnel_trust import tunnel_trust
from openbus.kernel.clock import SystemClock, SystemRandom
from openbus.kernel.errors import ConfigError, Unavailable


def _clear_stale_socket(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # nobody listens: a leftover of a crashed daemon
        return
    finally:
        probe.close()
    raise Unavailable(f"another daemon is already listening on {path}")


def _where(config: Config) -> str:
    return str(config.path or "<defaults>")


def _make_dir(config: Config, path: Path, key: str) -> None:
    """Create a directory the daemon needs; one line naming the key that set it when the
    path is a file, or cannot be made (never a ``FileExistsError`` traceback)."""
    what = "the state directory" if key == "daemon.state_dir" else "the socket's directory"
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{what} {path} exists and is not a directory", path=_where(config), key=key
        )
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(
            f"cannot create {what} {path}: {exc.strerror}", path=_where(config), key=key
        ) from None


def check_listen(config: Config) -> None:
    """The agents' port must be free: a port another process holds is one line naming
    ``daemon.listen`` here, instead of gunicorn's retries and its wall of errors."""
    d = config.daemon
    family = socket.AF_INET6 if ":" in d.listen_host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        probe.bind((d.listen_host, d.listen_port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            problem = f"{d.listen} is already in use (another daemon, or another program)"
        else:
            problem = f"cannot listen on {d.listen}: {exc.strerror}"
        raise ConfigError(
            f"{problem}; stop it, or set another port", path=_where(config), key="daemon.listen"
        ) from None
    finally:
        probe.close()


# Open files the daemon allows itself, at most: each pane's process is followed by a pidfd and
# its stat file held open, and systemd's default soft limit (1024) is reached at a few hundred
# panes. (asyncio polls with epoll: no ``select()`` limit applies.)
FILE_LIMIT = 65536


def raise_file_limit(most: int = FILE_LIMIT) -> None:
    """The soft limit on open files raised towards the hard one, at most ``most``; left as it
    is where it is already that high or cannot be raised."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = most if hard == resource.RLIM_INFINITY else min(hard, most)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


APP = "openbus.daemon.app:app_from_env()"  # what gunicorn's worker loads
ACCESS_FORMAT = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s %(L)s'


def gunicorn_argv(config: Config, app: str = APP) -> list[str]:
    sock = config.daemon.socket
    web = config.daemon.web_listen if web_access.served(config) else None
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "--workers",
        "1",
        "--worker-class",
        "openbus.daemon.http.worker.Worker",
        # asyncio's own loop, named: gunicorn's "auto" would take uvloop wherever it is
        # installed, and on uvloop a restore's launches on a new tmux server failed
        "--asgi-loop",
        "asyncio",
        "--bind",
        config.daemon.listen,
        "--bind",
        f"unix:{sock}",
        *(["--bind", web] if web else []),
        "--umask",
        "0o117" if config.hosted.enabled else "0o177",
        "--graceful-timeout",
        "10",
        "--timeout",
        "0",
        "--keep-alive",
        "75",
        # No access log unless asked for: even to /dev/null gunicorn formats every line, a
        # sixth of the worker's time per request under load.
        # (paths without their query: the web page's first address carries its secret)
        *(
            ["--access-logfile", "-", "--access-logformat", ACCESS_FORMAT]
            if os.environ.get("OPENBUS_ACCESS_LOG")
            else []
        ),
        "--error-logfile",
        "-",
        "--log-level",
        os.environ.get("OPENBUS_LOG_LEVEL", "info"),
        "--no-control-socket",
        # Keep header names with underscores, so the identity middleware sees (and audits)
        # every spelling of X-Tunnel-User instead of gunicorn silently dropping some.
        "--header-map",
        "dangerous",
        "--limit-request-line",
        "8190",
        app,
    ]


def operators_gid(config: Config) -> int | None:
    """The gid of ``[hosted] operators_group``; None when unset or unknown.

    An unknown group grants nobody (fail closed) and is reported on stderr, not refused: the
    default name, ``openbus-operators``, is absent until ``deploy/install`` has run.
    """
    name = config.hosted.operators_group
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        print(
            f"openbus: no group {name!r} ([hosted] operators_group): only the tunnel can reach "
            f"{config.daemon.socket}",
            file=sys.stderr,
            flush=True,
        )
        return None


def open_socket_directory(config: Config) -> None:
    """Hosted mode: let the tunnel's user and the operators' group (only they) reach the
    socket, through ACLs on its directory that the socket inherits (see ``socket_acl``)."""
    _, tunnel_uid = tunnel_trust(config)
    socket_acl.grant(
        config.daemon.socket.parent, tunnel_uid=tunnel_uid, operators_gid=operators_gid(config)
    )


def preflight(config: Config) -> None:
    """Everything the worker would refuse at start, reported here as one clear line first."""
    policy = PolicyRuntime.from_config(config, clock=SystemClock())
    audit = export_settings(config, policy)
    if audit.otlp_endpoint and audit.otlp_headers_file is not None:
        _check_headers_file(config, policy, audit.otlp_headers_file)
    if config.hosted.enabled:
        tunnel_trust(config)


def _check_headers_file(config: Config, policy: PolicyRuntime, headers: Path) -> None:
    """The OTLP headers file is read here, as the daemon's user, and not at config load (it is
    the daemon's secret, unreadable to the other users of the CLI). A failure names the key
    that set it: the policy's ``[audit] credential_file`` or the config's
    ``[audit] otlp_headers_file``."""
    try:
        read_headers_file(headers)
    except ConfigError as exc:
        loaded = policy.loaded
        if loaded is not None and loaded.policy.audit.endpoint:
            where, key = str(loaded.path), "audit.credential_file"
        else:
            where, key = str(config.path or "<defaults>"), "audit.otlp_headers_file"
        raise ConfigError(exc.message, path=where, key=key) from None


def serve(config: Config, app: str = APP) -> None:
    """Replace this process with gunicorn serving the daemon (``app``: the app spec gunicorn
    loads; a caller that adds features to the daemon names its own factory)."""
    preflight(config)
    _make_dir(config, config.daemon.state_dir, "daemon.state_dir")
    _make_dir(config, config.daemon.socket.parent, "daemon.socket")
    _clear_stale_socket(config.daemon.socket)
    check_listen(config)
    if config.hosted.enabled:
        open_socket_directory(config)
    env = dict(os.environ)
    if config.path is not None:
        env["OPENBUS_CONFIG"] = str(config.path.resolve())
    else:
        env.pop("OPENBUS_CONFIG", None)
    if not config.hosted.enabled:
        print(
            f"openbus: local mode as uid {os.getuid()}: agents on {config.daemon.listen}, "
            f"human side on {config.daemon.socket}. Local mode is not an isolation boundary: "
            "any process of this user can reach the socket.",
            file=sys.stderr,
            flush=True,
        )
    if web_access.served(config):
        secret = web_access.new_secret(config, SystemRandom())
        print(
            f"openbus: the web page: {web_access.login_url(config, secret)} (this start's "
            f"secret, also in {web_access.secret_path(config)}; `openbus ui` opens it)",
            file=sys.stderr,
            flush=True,
        )
    raise_file_limit()
    argv = gunicorn_argv(config, app)
    os.execve(argv[0], argv, env)  # noqa: S606 - gunicorn replaces this process, no shell
