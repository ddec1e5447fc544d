"""The daemon's configuration: TOML, validated strictly, with embedded defaults.

Every CLI verb takes ``--config FILE``; else ``$OPENBUS_CONFIG``; else the per-user default
(``$XDG_CONFIG_HOME/openbus/openbus.toml``), and when that file does not exist the embedded
defaults alone apply, so ``make run`` works on a fresh machine. Unknown keys and bad values
stop start-up with a ``ConfigError`` naming the key and the file: one line, never a traceback.

Beyond types, a value is refused when it could not work or would quietly weaken the box:
``[daemon] listen`` off loopback without ``allow_remote = true`` (the agents' port serves
``/mcp``), ``[daemon] web_listen`` (the human's page in local mode) off loopback or on the
agents' port, a duration that is not a finite positive number, an ``otlp_endpoint`` that is not
an http(s) URL with a host, ``[policy]`` with only one of ``file`` and ``org_public_key``, and
a unix socket path (``[daemon] socket``, given or defaulted, ``[tmux] socket``) longer than
the ``UNIX_PATH_MAX`` bytes the kernel takes. What can only be checked as the daemon's user
(the OTLP headers file is its secret) is checked by ``openbus serve`` before gunicorn starts.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openbus.kernel.errors import ConfigError
from openbus.kernel.harnesses import HARNESSES, OTLP_PROTOCOLS
from openbus.kernel.toml import read_toml
from openbus.kernel.urls import url_problem

HOSTED_CONFIG_PATH = "/etc/openbus/openbus.toml"
UNIX_PATH_MAX = 107  # bytes of a unix socket's path: sun_path is 108, with the final NUL


def _xdg(name: str, fallback: str) -> Path:
    value = os.environ.get(name)
    return Path(value) if value else Path.home() / fallback


def default_config_path() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "openbus" / "openbus.toml"


def default_state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "openbus"


def default_socket_path(state_dir: Path) -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "openbus" / "daemon.sock"
    return state_dir / "daemon.sock"


@dataclass(frozen=True)
class DaemonConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 7707
    allow_remote: bool = False  # listen off loopback: /mcp offered to the network
    socket: Path = field(default_factory=lambda: default_socket_path(default_state_dir()))
    state_dir: Path = field(default_factory=default_state_dir)
    # local mode's loopback web address for the human (None: off; never in hosted mode)
    web_host: str | None = "127.0.0.1"
    web_port: int = 7708

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def web_listen(self) -> str | None:
        return None if self.web_host is None else f"{self.web_host}:{self.web_port}"


@dataclass(frozen=True)
class TmuxConfig:
    socket: Path | None = None  # None: the user's own default server


@dataclass(frozen=True)
class AuditConfig:
    otlp_endpoint: str | None = None
    otlp_protocol: str = "grpc"
    otlp_headers_file: Path | None = None
    checkpoint_every: int = 1000
    checkpoint_seconds: float = 60.0
    box_name: str | None = None
    # an agent's refused calls: this many a window get their own records, then it is
    # rate-limited until the window closes, the rest counted in one summary record
    agent_refusal_burst: int = 30
    agent_refusal_window_seconds: float = 60.0


@dataclass(frozen=True)
class HistoryConfig:
    claude_config_dirs: tuple[Path, ...] = ()
    codex_homes: tuple[Path, ...] = ()


@dataclass(frozen=True)
class SessionsConfig:
    """``[sessions]``: what agents' session tools may reach."""

    trusted_dirs: tuple[Path, ...] = ()
    worktrees_root: Path = field(default_factory=lambda: Path.home() / ".openbus" / "worktrees")
    max_children: int = 4
    starts_per_hour: int = 20


@dataclass(frozen=True)
class ControlConfig:
    """The control session: which configured launcher runs it (Claude Code by default), and
    when it is re-seeded: its transcript's context past ``reseed_tokens``."""

    launcher: str = "claude"
    reseed_tokens: int = 150_000


@dataclass(frozen=True)
class Launcher:
    name: str
    harness: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    resume: tuple[str, ...] = ()
    command: str | None = None  # an opaque shell string: launches, never connectable

    @property
    def structured(self) -> bool:
        return self.command is None


@dataclass(frozen=True)
class PolicyConfig:
    file: Path | None = None
    org_public_key: Path | None = None


@dataclass(frozen=True)
class HostedConfig:
    enabled: bool = False
    tunnel_user: str = "openbus-tunnel"
    agent_user: str = "openbus-agent"
    operators_group: str | None = "openbus-operators"
    tunnel_public_key: Path | None = None
    signature_window_seconds: float = 30.0
    agent_isolation: str = "pool"  # "pool": one uid of agent_pool_group per agent; "shared"
    agent_pool_group: str = "openbus-agents"


AGENT_ISOLATION = ("pool", "shared")


@dataclass(frozen=True)
class Config:
    path: Path | None
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    tmux: TmuxConfig = field(default_factory=TmuxConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    launchers: Mapping[str, Launcher] = field(default_factory=dict)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    hosted: HostedConfig = field(default_factory=HostedConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    control: ControlConfig = field(default_factory=ControlConfig)

    @property
    def db_path(self) -> Path:
        return self.daemon.state_dir / "openbus.db"


def builtin_launchers() -> dict[str, Launcher]:
    """The default launchers, written in the structured form so Connect can inject."""
    return {
        "claude": Launcher(
            "claude", "claude", ("claude",), resume=("claude", "--resume", "{session_id}")
        ),
        "codex": Launcher("codex", "codex", ("codex",), resume=("codex", "resume", "{session_id}")),
        "opencode": Launcher("opencode", "opencode", ("opencode",)),
        "gemini": Launcher("gemini", "gemini", ("gemini",)),
        "omp": Launcher("omp", "omp", ("omp",)),
        "shell": Launcher("shell", "shell", (os.environ.get("SHELL") or "/bin/sh",)),
    }


# --------------------------------------------------------------------------- validation


class _Section:
    """Reads one table of the file, remembering which keys were consumed."""

    def __init__(self, data: Any, path: str, prefix: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError("must be a table", path=path, key=prefix)
        self.data: dict[str, Any] = data
        self.path = path
        self.prefix = prefix
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        self.seen.add(name)
        if name not in self.data:
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise ConfigError(
                f"expected {_kind_name(kinds)}, got a boolean", path=self.path, key=self.key(name)
            )
        if not isinstance(value, kinds):
            raise ConfigError(
                f"expected {_kind_name(kinds)}, got {type(value).__name__}",
                path=self.path,
                key=self.key(name),
            )
        return value

    def path_value(self, name: str, default: Path | None = None) -> Path | None:
        value = self.get(name, str)
        if value is None:
            return default
        if not value:
            raise ConfigError("must not be empty", path=self.path, key=self.key(name))
        return Path(os.path.expanduser(value))

    def str_list(self, name: str) -> tuple[str, ...] | None:
        value = self.get(name, list)
        if value is None:
            return None
        for item in value:
            if not isinstance(item, str):
                raise ConfigError("expected a list of strings", path=self.path, key=self.key(name))
        return tuple(value)

    def sub(self, name: str) -> _Section:
        self.seen.add(name)
        return _Section(self.data.get(name, {}), self.path, self.key(name))

    def finish(self) -> None:
        for name in self.data:
            if name not in self.seen:
                raise ConfigError("unknown key", path=self.path, key=self.key(name))


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        list: "a list",
        dict: "a table",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _choice(section: _Section, name: str, choices: tuple[str, ...], default: str) -> str:
    value: str = section.get(name, str, default)
    if value not in choices:
        raise ConfigError(
            f"must be one of {', '.join(choices)}; got {value!r}",
            path=section.path,
            key=section.key(name),
        )
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: what it resolves to is not known here


def _host_port(section: _Section, name: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"expected HOST:PORT, got {value!r}", path=section.path, key=section.key(name)
        )
    return host.strip("[]"), int(port)


def _parse_web_listen(section: _Section, agents_port: int) -> tuple[str | None, int]:
    """``[daemon] web_listen``: the human's page over loopback in local mode ("" turns it
    off). Always loopback: it is the human side, behind a per-start secret."""
    value: str = section.get("web_listen", str, "127.0.0.1:7708")
    if not value:
        return None, 0
    host, port = _host_port(section, "web_listen", value)
    if not _loopback(host):
        raise ConfigError(
            f"{host} is not a loopback address: the human's page is served on loopback only "
            "(reach it from elsewhere through the tunnel)",
            path=section.path,
            key=section.key("web_listen"),
        )
    if port == agents_port:
        raise ConfigError(
            f"port {port} is the agents' port (listen): the human's page needs its own",
            path=section.path,
            key=section.key("web_listen"),
        )
    return host, port


def _parse_listen(section: _Section) -> tuple[str, int, bool]:
    value: str = section.get("listen", str, "127.0.0.1:7707")
    host, port = _host_port(section, "listen", value)
    allow_remote: bool = section.get("allow_remote", bool, False)
    if not allow_remote and not _loopback(host):
        raise ConfigError(
            f"{host} is not a loopback address: the agents' port serves /mcp, so listening "
            "there offers the agents' tools to the network; use 127.0.0.1, or set "
            "allow_remote = true under [daemon] if that is meant",
            path=section.path,
            key=section.key("listen"),
        )
    return host, port, allow_remote


def _positive(section: _Section, name: str, kind: type, default: float) -> Any:
    value = section.get(name, (int, float) if kind is float else kind, default)
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"must be a finite positive number, got {value!r}",
            path=section.path,
            key=section.key(name),
        )
    return kind(value)


def _endpoint(section: _Section, name: str) -> str | None:
    value: str | None = section.get(name, str)
    if value is not None and (problem := url_problem(value)) is not None:
        raise ConfigError(f"{problem}, got {value!r}", path=section.path, key=section.key(name))
    return value


def _socket_path(section: _Section, name: str, value: Path | None, *, default: bool) -> None:
    if value is None:
        return
    size = len(os.fsencode(str(value)))
    if size > UNIX_PATH_MAX:
        what = "the default socket path" if default else "the socket path"
        fix = f"set {section.key(name)} to a shorter path" if default else "use a shorter path"
        raise ConfigError(
            f"{what} {str(value)!r} is {size} bytes, over the {UNIX_PATH_MAX} a unix socket "
            f"path may have; {fix}",
            path=section.path,
            key=section.key(name),
        )


def _launcher(name: str, section: _Section) -> Launcher:
    command = section.get("command", str)
    if command is None:
        if "harness" not in section.data:
            raise ConfigError(
                "a structured launcher needs a harness",
                path=section.path,
                key=section.key("harness"),
            )
        harness = _choice(section, "harness", HARNESSES, "unknown")
        argv = section.str_list("argv")
        if not argv:
            raise ConfigError(
                "a structured launcher needs a non-empty argv (or an opaque command)",
                path=section.path,
                key=section.key("argv"),
            )
    else:
        harness = _choice(section, "harness", HARNESSES, "unknown")
        argv = ()
        for forbidden in ("argv", "env", "resume"):
            if forbidden in section.data:
                raise ConfigError(
                    "an opaque command launcher takes no " + forbidden,
                    path=section.path,
                    key=section.key(forbidden),
                )
    env_raw = section.get("env", dict, {})
    for key, value in env_raw.items():
        if not isinstance(value, str):
            raise ConfigError(
                "environment values must be strings",
                path=section.path,
                key=section.key(f"env.{key}"),
            )
    resume = section.str_list("resume") or ()
    cwd = section.path_value("cwd")
    section.finish()
    return Launcher(
        name=name,
        harness=harness,
        argv=tuple(argv),
        env=dict(env_raw),
        cwd=cwd,
        resume=resume,
        command=command,
    )


def parse_config(data: Mapping[str, Any], path: str, *, hosted_default: bool = False) -> Config:
    root = _Section(dict(data), path, "")

    d = root.sub("daemon")
    host, port, allow_remote = _parse_listen(d)
    web_host, web_port = _parse_web_listen(d, port)
    state_dir = d.path_value("state_dir", default_state_dir())
    assert state_dir is not None
    given_socket = d.path_value("socket")
    socket = given_socket or default_socket_path(state_dir)
    _socket_path(d, "socket", socket, default=given_socket is None)
    d.finish()

    t = root.sub("tmux")
    tmux = TmuxConfig(socket=t.path_value("socket"))
    _socket_path(t, "socket", tmux.socket, default=False)
    t.finish()

    a = root.sub("audit")
    audit = AuditConfig(
        otlp_endpoint=_endpoint(a, "otlp_endpoint"),
        otlp_protocol=_choice(a, "otlp_protocol", OTLP_PROTOCOLS, "grpc"),
        otlp_headers_file=a.path_value("otlp_headers_file"),
        checkpoint_every=_positive(a, "checkpoint_every", int, 1000),
        checkpoint_seconds=_positive(a, "checkpoint_seconds", float, 60.0),
        box_name=a.get("box_name", str),
        agent_refusal_burst=_positive(a, "agent_refusal_burst", int, 30),
        agent_refusal_window_seconds=_positive(a, "agent_refusal_window_seconds", float, 60.0),
    )
    a.finish()

    h = root.sub("history")
    history = HistoryConfig(
        claude_config_dirs=tuple(
            Path(os.path.expanduser(p)) for p in (h.str_list("claude_config_dirs") or ())
        ),
        codex_homes=tuple(Path(os.path.expanduser(p)) for p in (h.str_list("codex_homes") or ())),
    )
    h.finish()

    launchers = builtin_launchers()
    ls = root.sub("launchers")
    for name in list(ls.data):
        launchers[name] = _launcher(name, ls.sub(name))
    ls.finish()

    p = root.sub("policy")
    policy = PolicyConfig(file=p.path_value("file"), org_public_key=p.path_value("org_public_key"))
    if policy.org_public_key is not None and policy.file is None:
        raise ConfigError(
            "missing: org_public_key is set, but no policy file for it to verify; set file "
            "too, or remove org_public_key",
            path=p.path,
            key=p.key("file"),
        )
    if policy.file is not None and policy.org_public_key is None:
        raise ConfigError(
            "missing: an org policy needs the org's pinned public key to verify it",
            path=p.path,
            key=p.key("org_public_key"),
        )
    p.finish()

    ho = root.sub("hosted")
    hosted = HostedConfig(
        enabled=ho.get("enabled", bool, hosted_default),
        tunnel_user=ho.get("tunnel_user", str, "openbus-tunnel"),
        agent_user=ho.get("agent_user", str, "openbus-agent"),
        operators_group=ho.get("operators_group", str, "openbus-operators"),
        tunnel_public_key=ho.path_value("tunnel_public_key"),
        signature_window_seconds=_positive(ho, "signature_window_seconds", float, 30.0),
        agent_isolation=_choice(ho, "agent_isolation", AGENT_ISOLATION, "pool"),
        agent_pool_group=ho.get("agent_pool_group", str, "openbus-agents"),
    )
    ho.finish()

    se = root.sub("sessions")
    sessions = SessionsConfig(
        trusted_dirs=tuple(
            Path(os.path.expanduser(p)) for p in (se.str_list("trusted_dirs") or ())
        ),
        worktrees_root=se.path_value("worktrees_root", SessionsConfig().worktrees_root)
        or SessionsConfig().worktrees_root,
        max_children=_positive(se, "max_children", int, 4),
        starts_per_hour=_positive(se, "starts_per_hour", int, 20),
    )
    se.finish()
    c = root.sub("control")
    control = ControlConfig(
        launcher=c.get("launcher", str, "claude"),
        reseed_tokens=_positive(c, "reseed_tokens", int, 150_000),
    )
    if control.launcher not in launchers:
        raise ConfigError(
            f"no launcher named {control.launcher!r} (configured: {', '.join(sorted(launchers))})",
            path=c.path,
            key=c.key("launcher"),
        )
    c.finish()
    root.finish()

    return Config(
        path=Path(path) if path != "<defaults>" else None,
        daemon=DaemonConfig(
            listen_host=host,
            listen_port=port,
            allow_remote=allow_remote,
            socket=socket,
            state_dir=state_dir,
            web_host=web_host,
            web_port=web_port,
        ),
        tmux=tmux,
        audit=audit,
        history=history,
        launchers=launchers,
        policy=policy,
        hosted=hosted,
        sessions=sessions,
        control=control,
    )


def resolve_config_path(
    explicit: str | None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """``--config``, else ``$OPENBUS_CONFIG``, else the per-user file if it exists."""
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get("OPENBUS_CONFIG"):
        return Path(env["OPENBUS_CONFIG"])
    per_user = default_config_path()
    if per_user.exists():
        return per_user
    if os.geteuid() != 0 or not Path(HOSTED_CONFIG_PATH).exists():
        return None
    return Path(HOSTED_CONFIG_PATH)


def load_config(
    explicit: str | None = None, *, reader: Callable[[Path], bytes] | None = None
) -> Config:
    path = resolve_config_path(explicit)
    if path is None:
        return parse_config({}, "<defaults>")
    data = read_toml(path, reader)
    return parse_config(data, str(path), hosted_default=str(path) == HOSTED_CONFIG_PATH)
