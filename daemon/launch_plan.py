"""How a launcher becomes a command line, with the openbus endpoint injected for one launch.

Theory of operation
-------------------
Pure functions, no I/O. Given a launcher (``daemon.config.Launcher``), a preset, an optional
first prompt and the endpoint's URL, ``plan_launch`` returns the argv and environment of the
harness process and says whether Connect is available and, if not, why:

* **Claude Code** (structured): ``--session-id <uuid>`` on every launch, connected or not (the
  principal is bound to its session at launch; an agent launched Off can be restarted onto
  its session later), and when connected ``--mcp-config`` with one HTTP server named
  ``openbus`` whose ``Authorization`` header is ``Bearer ${OPENBUS_TOKEN}``: Claude Code
  expands the variable from its own environment, so the token never appears in argv;
  ``--allowedTools mcp__openbus`` so the harness does not ask the human a second time for
  what the daemon already gates. ``--strict-mcp-config`` is deliberately *not* passed: it
  would silently drop
  the user's own MCP servers from this launch, and the injection must add, not take away.
* **Codex** (structured): ``-c mcp_servers.openbus.url=...``, ``-c
  mcp_servers.openbus.bearer_token_env_var="OPENBUS_TOKEN"`` and ``-c
  mcp_servers.openbus.default_tools_approval_mode="approve"``; its session id is bound later,
  from its rollout's session_meta.
* **Gemini CLI** (structured): ``--session-id <uuid>`` on every launch, as for Claude Code,
  and when connected a system settings file for this launch (``settings``, named to the
  harness by ``GEMINI_CLI_SYSTEM_SETTINGS_PATH``) holding one MCP server ``openbus``
  (``httpUrl``, ``trust: true`` so the harness does not ask a second time, and an
  ``Authorization`` header of ``Bearer $OPENBUS_TOKEN``: Gemini CLI expands variables in its
  settings from its own environment, so the file holds no secret). The caller writes the file
  0600 and removes it when the agent ends. The file takes the place of the host's own system
  settings file for that process; Gemini CLI 0.61 reads it only where it and every directory
  above it are root's and writable by no one else (``gemini_settings_refusal``).
* **OpenCode, omp, shell, unknown, and every opaque ``command`` launcher**: launched
  as configured; Connect is unavailable, with the reason.

``plan_resume`` is the same for a session being resumed: the launcher's ``resume`` template
(``{session_id}`` filled in; without one, the harness's own resume form after the launcher's
argv), plus the same override when connected. A launcher with no resume form (opaque, or a
harness that has none) is refused naming the reason.

The first prompt follows ``--`` as the harness's positional prompt (Claude Code and Codex),
so a prompt starting with ``-`` is never read as an option. Gemini CLI (0.59 and 0.61) takes
no prompt after ``--`` (its argv parser keeps those words apart from its positional query, and
the TUI starts with an empty composer): it gets ``--prompt-interactive=PROMPT``, one word, so a
leading ``-`` is the value's, which it runs as its first turn and then stays interactive. A
one-shot ``gemini -p`` already holds its prompt and is refused another. Variadic options such as
``--allowedTools`` would otherwise swallow it. A *connected interactive* launch (a TUI, not
``claude -p`` or ``codex exec``) does not take it in argv: the TUI would send it as its first
turn before it has loaded the openbus server, and the model would never see the tools it was
launched to use. The plan hands it back as ``typed_prompt`` instead; the launch types it once
the agent has listed its openbus tools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from openbus.daemon.config import Launcher
from openbus.kernel.errors import BadRequest
from openbus.kernel.scopes import Preset

TOKEN_ENV = "OPENBUS_TOKEN"  # noqa: S105 - the variable's name, not a token
SERVER_NAME = "openbus"
MAX_PROMPT_CHARS = 32 * 1024
MAX_PATH_BYTES = 4096  # PATH_MAX on Linux, counting the terminating NUL
CONNECTABLE = ("claude", "codex", "gemini")
PRESET_SESSION = ("claude", "gemini")  # given ``--session-id <uuid>`` at launch
GEMINI_SETTINGS_ENV = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
PROMPTABLE = ("claude", "codex", "gemini")

UNAVAILABLE = {
    "opencode": "Connect is unavailable for OpenCode: it takes the endpoint per launch "
    "(OPENCODE_CONFIG_CONTENT, its header read from the environment), but it has no way to be "
    "given its session id at launch, so the launch token cannot be bound to a session",
    "omp": "Connect is unavailable for omp: it has no per-launch MCP server option (no flag or "
    "environment variable naming an MCP config), and no way to be given its session id at "
    "launch",
    "shell": "Connect is unavailable for a shell: it is not an agent",
    "unknown": "Connect is unavailable for a launcher of unknown harness",
}
OPAQUE_REASON = (
    "Connect is unavailable for an opaque command launcher: openbus does not parse shell strings, "
    "so it cannot add the endpoint safely; rewrite it as a structured launcher (harness, argv)"
)


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # secret-free; the token is added apart
    connect: bool = False  # a token is minted and injected
    reason: str | None = None  # why Connect is unavailable, when it is asked for and is
    session_id: str | None = None  # preset session id (Claude Code, Gemini CLI)
    typed_prompt: str | None = None  # typed once the agent listed its tools (not in argv)
    # a per-launch settings file the caller writes (0600) and names in ``settings_env``
    settings: str | None = None
    settings_env: str | None = None


def one_shot(launcher: Launcher) -> bool:
    """Whether the launcher runs the harness non-interactively (``claude -p``/``--print``,
    ``codex exec``, ``gemini -p``): its prompt can only be argv, and it loads its MCP servers
    first."""
    argv = launcher.argv[1:]
    if launcher.harness == "claude":
        return any(a in ("-p", "--print") for a in argv)
    if launcher.harness == "codex":
        return bool(argv) and argv[0] in ("exec", "e")
    if launcher.harness == "gemini":
        return any(a in ("-p", "--prompt") or a.startswith("--prompt=") for a in argv)
    return False


def connect_unavailable(launcher: Launcher) -> str | None:
    """Why this launcher cannot be connected, or None when it can."""
    if not launcher.structured:
        return OPAQUE_REASON
    if launcher.harness in CONNECTABLE:
        return None
    return UNAVAILABLE.get(launcher.harness, UNAVAILABLE["unknown"])


def check_prompt(prompt: object, launcher: Launcher) -> str | None:
    if prompt is None:
        return None
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be text", field="prompt")
    if not prompt.strip():
        raise BadRequest("prompt must not be empty (leave it out instead)", field="prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise BadRequest(f"prompt is longer than {MAX_PROMPT_CHARS} characters", field="prompt")
    if any(ch == "\0" or (ord(ch) < 32 and ch not in "\n\t") for ch in prompt):
        raise BadRequest("prompt may hold printable text, newlines and tabs only", field="prompt")
    if not launcher.structured or launcher.harness not in PROMPTABLE:
        kind = "an opaque command launcher" if not launcher.structured else launcher.harness
        raise BadRequest(
            f"a first prompt cannot be passed to {kind}; launch without --prompt", field="prompt"
        )
    if launcher.harness == "gemini" and one_shot(launcher):
        raise BadRequest(
            "this launcher already gives Gemini CLI its prompt (-p); launch without --prompt",
            field="prompt",
        )
    return prompt


def claude_mcp_config(url: str) -> str:
    server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}
    return json.dumps({"mcpServers": {SERVER_NAME: server}}, separators=(",", ":"))


def gemini_settings(url: str) -> str:
    server = {
        "httpUrl": url,
        "headers": {"Authorization": f"Bearer ${TOKEN_ENV}"},
        "trust": True,
    }
    return json.dumps({"mcpServers": {SERVER_NAME: server}}, separators=(",", ":"))


def settings_for(harness: str, mcp_url: str, connect: bool) -> dict[str, str | None]:
    """The per-launch settings file a connected harness reads the endpoint from, if any."""
    if connect and harness == "gemini":
        return {"settings": gemini_settings(mcp_url), "settings_env": GEMINI_SETTINGS_ENV}
    return {}


def gemini_settings_refusal(chain: list[tuple[str, int, int]], *, root: bool) -> str | None:
    """Why Gemini CLI would ignore a settings file in the last directory of ``chain``
    (``(path, owner uid, mode)`` from ``/`` down), or None. Gemini CLI 0.61 skips a system
    settings file unless the daemon, the file and every directory above it are root's and
    writable by no one else."""
    head = (
        "Connect is unavailable for Gemini CLI on this host: it reads the per-launch settings "
        "file only when that file and every directory above it are owned by root and writable "
        "by no one else"
    )
    if not root:
        return f"{head}, and this daemon does not run as root"
    for path, uid, mode in chain:
        if uid != 0 or mode & 0o022:
            return f"{head}; {path} is not (owner uid {uid}, mode {mode & 0o7777:o})"
    return None


def codex_overrides(url: str) -> list[str]:
    prefix = f"mcp_servers.{SERVER_NAME}"
    return [
        "-c",
        f"{prefix}.url={json.dumps(url)}",
        "-c",
        f"{prefix}.bearer_token_env_var={json.dumps(TOKEN_ENV)}",
        "-c",
        f'{prefix}.default_tools_approval_mode="approve"',
    ]


def plan_launch(
    launcher: Launcher,
    *,
    preset: Preset,
    prompt: str | None,
    mcp_url: str,
    session_id: str | None,
    shell: str = "/bin/sh",
    refusal: str | None = None,
) -> LaunchPlan:
    """The harness command for one launch. ``session_id`` is the preset id to give Claude Code
    or Gemini CLI (made by the caller from its injected randomness)."""
    env = dict(launcher.env)
    if not launcher.structured:
        assert launcher.command is not None
        reason = OPAQUE_REASON if preset is not Preset.OFF else None
        return LaunchPlan((shell, "-c", launcher.command), env, False, reason)
    reason = connect_unavailable(launcher) or refusal
    connect = preset is not Preset.OFF and reason is None
    argv = list(launcher.argv)
    bound: str | None = None
    if launcher.harness in PRESET_SESSION and session_id is not None:
        bound = session_id
        argv += ["--session-id", bound]
    if connect:
        argv += endpoint_override(launcher.harness, mcp_url)
    typed: str | None = None
    if prompt is not None and connect and not one_shot(launcher):
        typed = prompt
    elif prompt is not None:
        argv += argv_prompt(launcher.harness, prompt)
    return LaunchPlan(
        tuple(argv),
        env,
        connect,
        reason if preset is not Preset.OFF else None,
        bound,
        typed,
        **settings_for(launcher.harness, mcp_url, connect),
    )


def argv_prompt(harness: str, prompt: str) -> list[str]:
    """The words that give a harness its first prompt in argv."""
    if harness == "gemini":
        return [f"--prompt-interactive={prompt}"]
    return ["--", prompt]


def endpoint_override(harness: str, mcp_url: str) -> list[str]:
    """The per-launch arguments that add the openbus endpoint (token from the environment)."""
    if harness == "claude":
        return [
            "--mcp-config",
            claude_mcp_config(mcp_url),
            "--allowedTools",
            f"mcp__{SERVER_NAME}",
        ]
    if harness == "codex":
        return codex_overrides(mcp_url)
    return []


# What a harness's own argv takes to resume a session (the history's resume argv, less the
# binary), always by the session's full id, never by "latest" or a list index (a newer session
# in the same project would take its place). OpenCode 1.18 continues a session with
# ``--session ID`` (``-s``). Gemini CLI 0.59 and 0.61 document ``--resume`` with "latest" or an
# index, but match a full session id first (``findSession``: its error names
# ``--resume {uuid}``), in the project of the cwd it runs in. omp 18.2 takes ``--resume`` with an
# id prefix (a full id matches only its own session), in the cwd's project first, then any.
RESUME_FORMS = {
    "claude": ("--resume", "{session_id}"),
    "codex": ("resume", "{session_id}"),
    "opencode": ("--session", "{session_id}"),
    "omp": ("--resume", "{session_id}"),
    "gemini": ("--resume", "{session_id}"),
}


def resume_unavailable(launcher: Launcher) -> str | None:
    """Why a session of this launcher cannot be resumed through it, or None when it can."""
    if not launcher.structured:
        return (
            "it was started from an opaque command launcher: openbus does not parse shell "
            "strings, so it cannot reproduce the launch; rewrite it as a structured launcher"
        )
    if launcher.harness == "shell":
        return "it is a shell, not an agent: quitting it would leave nothing to resume"
    if not launcher.resume and launcher.harness not in RESUME_FORMS:
        return f"launcher {launcher.name!r} ({launcher.harness}) has no resume command"
    return None


def plan_resume(launcher: Launcher, *, session_id: str, preset: Preset, mcp_url: str) -> LaunchPlan:
    """The command that resumes ``session_id`` through ``launcher``, connected unless Off."""
    reason = resume_unavailable(launcher)
    if reason is not None:
        raise BadRequest(f"cannot resume through this launcher: {reason}", field="launcher")
    template = launcher.resume or (*launcher.argv, *RESUME_FORMS[launcher.harness])
    argv = [word.replace("{session_id}", session_id) for word in template]
    unavailable = connect_unavailable(launcher) if preset is not Preset.OFF else None
    connect = preset is not Preset.OFF and unavailable is None
    if connect:
        argv += endpoint_override(launcher.harness, mcp_url)
    return LaunchPlan(
        tuple(argv),
        dict(launcher.env),
        connect,
        unavailable,
        session_id,
        **settings_for(launcher.harness, mcp_url, connect),
    )


# Kept across the switch to the pool user besides the launch's own variables: what tmux gives a
# pane that the harness may use. TMUX (the server's socket) is not: the pool user cannot open it.
POOL_KEEP_ENV = ("COLORTERM", "LANG", "LC_ALL", "TMUX_PANE")


def as_pool_user(
    argv: tuple[str, ...] | list[str], *, user: str, env_names: list[str]
) -> list[str]:
    """The pane's command that runs ``argv`` as the pool user ``user``: sudo (the deployed rule
    lets the tmux server's user run commands only as members of the pool group, never as root
    or the daemon's users) execs the harness under the pool user's uid, keeping exactly the
    named variables (the token among them, never in argv) and resetting the rest."""
    names = sorted({*env_names, *POOL_KEEP_ENV})
    if any(not n or "," in n or "=" in n for n in names):
        raise BadRequest("environment variable names may not hold ',' or '='", field="env")
    return [
        "sudo",
        "--non-interactive",
        "--set-home",
        "--user",
        user,
        f"--preserve-env={','.join(names)}",
        "--",
        *argv,
    ]


def check_cwd(value: object, default: Path | None) -> Path | None:
    """The launch directory: absolute, existing, a directory. None: the tmux default."""
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise BadRequest("cwd must be a path", field="cwd")
    if "\0" in value or "\n" in value:
        raise BadRequest("cwd must be one line without NUL", field="cwd")
    if len(value.encode("utf-8", "surrogateescape")) >= MAX_PATH_BYTES:
        raise BadRequest(f"cwd is longer than {MAX_PATH_BYTES - 1} bytes", field="cwd")
    path = Path(value)
    if not path.is_absolute():
        raise BadRequest(f"cwd must be an absolute path, got {value!r}", field="cwd")
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:  # a component too long, a loop, no permission on the way
        raise BadRequest(f"cwd cannot be looked up: {exc.strerror}", field="cwd") from None
    if not exists:
        raise BadRequest(f"no such directory: {value}", field="cwd")
    if not is_dir:
        raise BadRequest(f"not a directory: {value}", field="cwd")
    return path
