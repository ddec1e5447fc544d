"""Launching the real Claude Code and Codex CLIs against a ``StubModel``.

The CLIs come from ``make harnesses``: each pinned version (the Makefile's ``HARNESS_PINS``,
``<name>-<version>``) in its own npm prefix, ``<repo>/.harness/<name>-<version>/node_modules/.bin``.
The first pin listed for a harness is the one in use; the others (the newest the registry served
when they were added) run the real-harness tests too: the ``claude`` / ``codex`` fixtures and
``pins()`` parametrize over every pin, ``make_claude`` / ``make_codex`` without a version use the
one in use. A test that needs one carries ``@pytest.mark.harness`` and, finding it missing, skips
with the reason (fails where ``OPENBUS_REQUIRE`` names ``harness``). Each harness gets a private
config home under the test's tmp dir, seeded so the interactive TUI starts straight at its prompt:

* Claude Code: ``CLAUDE_CONFIG_DIR/.claude.json`` with onboarding done, a theme, the API key's
  last 20 characters approved, the cwd's realpath trusted and the auto-mode offer seen, and
  ``settings.json`` in manual permission mode (``MANUAL_MODE``: merge it into any other); the
  environment points it at the stub and turns off its outside traffic.
* Codex: ``CODEX_HOME/config.toml`` with a ``stub`` Responses provider, no update check, no
  background app-server (``features.daemon_auto_start = false``) and the cwd trusted.

``ClaudeHarness`` / ``CodexHarness`` give the environment and argv for each way of running:
``tui_argv()``, ``print_argv(prompt)`` (``claude -p``), ``exec_argv(prompt)`` (``codex exec``),
plus ``mcp_args(...)`` to add an MCP server with its bearer token read from the environment.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.require import skip_missing
from tests.support.stub_model import StubModel
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
# ``make harnesses`` installs under here; OPENBUS_HARNESS_DIR points elsewhere (a shared cache).
HARNESS_DIR = Path(os.environ.get("OPENBUS_HARNESS_DIR") or REPO / ".harness")
STUB_API_KEY = "sk-ant-api03-stub-0123456789abcdefghijklmnopqrstuvwxyz"
STUB_OPENAI_KEY = "sk-stub-openai-0123456789"
CODEX_MODEL = "stub-model"
# The npm package and the binary of each harness a pin can name.
PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "opencode": "opencode-ai",
    "gemini": "@google/gemini-cli",
    "omp": "@oh-my-pi/pi-coding-agent",
}


@dataclass(frozen=True)
class Pin:
    """One pinned version of one harness CLI, installed in its own npm prefix."""

    name: str
    version: str
    in_use: bool = False

    @property
    def id(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def prefix(self) -> Path:
        return HARNESS_DIR / self.id

    @property
    def bin_dir(self) -> Path:
        return self.prefix / "node_modules" / ".bin"

    @property
    def binary(self) -> Path | None:
        """The installed CLI, or None. A tree of the older single-prefix layout
        (``.harness/node_modules``) serves when it holds exactly this version."""
        for bin_dir, package in (
            (self.bin_dir, self.prefix / "node_modules" / PACKAGES[self.name]),
            (
                HARNESS_DIR / "node_modules" / ".bin",
                HARNESS_DIR / "node_modules" / PACKAGES[self.name],
            ),
        ):
            path = bin_dir / self.name
            if path.exists() and os.access(path, os.X_OK) and _version(package) == self.version:
                return path
        return None


def _version(package: Path) -> str | None:
    try:
        found = json.loads((package / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None
    return found if isinstance(found, str) else None


def _makefile_pins(makefile: Path = REPO / "Makefile") -> list[str]:
    """The words of ``HARNESS_PINS := ...`` in the Makefile (continuation lines joined)."""
    text = makefile.read_text().replace("\\\n", " ")
    match = re.search(r"^HARNESS_PINS\s*:?=(.*)$", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{makefile} has no HARNESS_PINS")
    return match.group(1).split("#", 1)[0].split()


def _pins() -> tuple[Pin, ...]:
    found: list[Pin] = []
    for word in _makefile_pins():
        name, _, version = word.partition("-")
        if name not in PACKAGES or not version:
            continue  # a harness this module does not drive yet
        found.append(Pin(name, version, in_use=not any(p.name == name for p in found)))
    return tuple(found)


PINS = _pins()


def pins(name: str) -> list[Pin]:
    """Every pinned version of ``name``, the one in use first."""
    return [pin for pin in PINS if pin.name == name]


def pin(name: str, version: str | None = None) -> Pin:
    """The pin of ``name`` at ``version`` (None: the one in use)."""
    for found in pins(name):
        if version is None or found.version == version:
            return found
    raise LookupError(f"{name} {version or ''} is not in the Makefile's HARNESS_PINS")


CLAUDE_VERSION = pin("claude").version
CODEX_VERSION = pin("codex").version


def pin_params(*names: str) -> list[Any]:
    """``pytest.param`` per pin of each of ``names`` (id ``claude-2.1.197``), for
    ``@pytest.mark.parametrize`` or ``@pytest.fixture(params=...)``."""
    return [pytest.param(found, id=found.id) for name in names for found in pins(name)]


def harness_binary(name: str, version: str | None = None) -> Path | None:
    """The installed CLI (``claude`` or ``codex``) at ``version`` (None: the one in use), or
    None where it is not installed."""
    return pin(name, version).binary


def require_binary(name: str, version: str | None = None) -> Path:
    """The installed CLI, or skip the test saying why."""
    found = pin(name, version)
    path = found.binary
    if path is None:
        reason = (
            f"{found.id} CLI not installed at {found.bin_dir / name} "
            "(run `make harnesses`; npm could not install it)"
        )
        print(reason)
        skip_missing("harness", reason)
    return path


def _base_env(home: Path, binary: Path) -> dict[str, str]:
    return {
        "PATH": f"{binary.parent}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


@dataclass
class ClaudeHarness:
    binary: Path
    config_dir: Path
    home: Path
    cwd: Path
    stub: StubModel
    version: str = ""
    api_key: str = STUB_API_KEY
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for any way of running Claude Code (TUI or ``-p``)."""
        return {
            **_base_env(self.home, self.binary),
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "ANTHROPIC_BASE_URL": self.stub.url,
            "ANTHROPIC_API_KEY": self.api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            **self.extra_env,
            **extra,
        }

    def tui_argv(self, *extra: str) -> list[str]:
        return [str(self.binary), *extra]

    def print_argv(self, prompt: str, *extra: str) -> list[str]:
        return [str(self.binary), "-p", prompt, *extra]

    @staticmethod
    def mcp_args(
        name: str, url: str, token_env: str | None = None, *, allow: bool = False
    ) -> list[str]:
        """``--mcp-config`` for one HTTP MCP server (``--strict-mcp-config``: no other). The
        bearer token is written as ``${token_env}``, which Claude Code expands from its
        environment, so the token never reaches argv. ``allow`` pre-grants the server's tools
        (``--allowedTools mcp__NAME``), else every call asks."""
        server: dict[str, Any] = {"type": "http", "url": url}
        if token_env is not None:
            server["headers"] = {"Authorization": f"Bearer ${{{token_env}}}"}
        args = ["--mcp-config", json.dumps({"mcpServers": {name: server}}), "--strict-mcp-config"]
        if allow:
            args += ["--allowedTools", f"mcp__{name}"]
        return args

    @property
    def sessions_dir(self) -> Path:
        """Where the live ``<pid>.json`` status files appear."""
        return self.config_dir / "sessions"

    @property
    def transcripts_dir(self) -> Path:
        return self.config_dir / "projects" / str(self.cwd.resolve()).replace("/", "-")

    def live_status(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.sessions_dir.glob("*.json")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return found


# Every tool call asks first (Claude Code's manual mode; the only mode before 2.1.224).
MANUAL_MODE: dict[str, Any] = {"permissions": {"defaultMode": "default"}}


def make_claude(
    root: Path, stub: StubModel, cwd: Path, version: str | None = None
) -> ClaudeHarness:
    """A private Claude Code config under ``root`` for a TUI started in ``cwd``, run by the
    pinned ``version`` (None: the one in use)."""
    version = pin("claude", version).version
    binary = require_binary("claude", version)
    config_dir = root / "claude-config"
    home = root / "claude-home"
    config_dir.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    harness = ClaudeHarness(binary, config_dir, home, cwd, stub, version=version)
    seed = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": version,
        "lastReleaseNotesSeen": version,
        "theme": "dark",
        "numStartups": 1,
        "customApiKeyResponses": {"approved": [harness.api_key[-20:]], "rejected": []},
        # 2.1.224 and later start in auto mode (no permission prompts) or, with manual mode the
        # default, first offer to make auto mode the default: both answered here
        "hasSeenAutoDefaultNudge": True,
        "hasResetAutoModeOptInForDefaultOffer": True,
        "projects": {
            str(cwd.resolve()): {
                "hasTrustDialogAccepted": True,
                "hasCompletedProjectOnboarding": True,
                "allowedTools": [],
            }
        },
    }
    (config_dir / ".claude.json").write_text(json.dumps(seed, indent=2))
    (config_dir / "settings.json").write_text(json.dumps(MANUAL_MODE, indent=2))
    return harness


@dataclass
class CodexHarness:
    binary: Path
    codex_home: Path
    home: Path
    cwd: Path
    stub: StubModel
    version: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **_base_env(self.home, self.binary),
            "CODEX_HOME": str(self.codex_home),
            "STUB_KEY": STUB_OPENAI_KEY,
            **self.extra_env,
            **extra,
        }

    def tui_argv(self, *extra: str) -> list[str]:
        return [str(self.binary), *extra]

    def exec_argv(self, prompt: str, *extra: str) -> list[str]:
        return [str(self.binary), "exec", "--skip-git-repo-check", *extra, prompt]

    @staticmethod
    def mcp_args(
        name: str, url: str, token_env: str | None = None, *, approval: str | None = None
    ) -> list[str]:
        """``-c`` overrides adding one streamable-HTTP MCP server; the bearer token is read
        from the environment variable ``token_env``. ``approval`` sets
        ``default_tools_approval_mode`` (auto, prompt, writes, approve); ``codex exec`` refuses
        calls that would need a prompt, so give it ``approve`` there."""
        args = ["-c", f"mcp_servers.{name}.url={json.dumps(url)}"]
        if token_env is not None:
            args += ["-c", f"mcp_servers.{name}.bearer_token_env_var={json.dumps(token_env)}"]
        if approval is not None:
            args += ["-c", f"mcp_servers.{name}.default_tools_approval_mode={json.dumps(approval)}"]
        return args

    @property
    def sessions_dir(self) -> Path:
        return self.codex_home / "sessions"

    def rollouts(self) -> list[Path]:
        return sorted(self.sessions_dir.rglob("rollout-*.jsonl"))


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def make_codex(
    root: Path,
    stub: StubModel,
    cwd: Path,
    version: str | None = None,
    *,
    disable_paste_burst: bool = False,
) -> CodexHarness:
    """A private ``CODEX_HOME`` under ``root`` for Codex started in ``cwd``, run by the pinned
    ``version`` (None: the one in use)."""
    version = pin("codex", version).version
    binary = require_binary("codex", version)
    codex_home = root / "codex-home"
    home = root / "codex-user-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    lines = [
        f"model = {_toml_str(CODEX_MODEL)}",
        'model_provider = "stub"',
        "check_for_update_on_startup = false",
    ]
    if disable_paste_burst:
        lines.append("disable_paste_burst = true")
    lines += [
        "",
        "[model_providers.stub]",
        'name = "stub"',
        f"base_url = {_toml_str(stub.openai_base_url)}",
        'env_key = "STUB_KEY"',
        'wire_api = "responses"',
        "",
        "[features]",
        "daemon_auto_start = false",
        "",
        f"[projects.{_toml_str(str(cwd.resolve()))}]",
        'trust_level = "trusted"',
        "",
    ]
    (codex_home / "config.toml").write_text("\n".join(lines))
    return CodexHarness(binary, codex_home, home, cwd, stub, version=version)


def workdir(root: Path, name: str = "project") -> Path:
    """A fresh working directory (the harness's cwd) under ``root``."""
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(params=pin_params("claude"))
def claude(request: pytest.FixtureRequest, tmp_path: Path, stub_model: StubModel) -> ClaudeHarness:
    """Claude Code configured against ``stub_model``, cwd ``tmp_path/project``: once per pinned
    version."""
    return make_claude(tmp_path, stub_model, workdir(tmp_path), request.param.version)


@pytest.fixture(params=pin_params("codex"))
def codex(request: pytest.FixtureRequest, tmp_path: Path, stub_model: StubModel) -> CodexHarness:
    """Codex configured against ``stub_model``, cwd ``tmp_path/project``: once per pinned
    version."""
    return make_codex(tmp_path, stub_model, workdir(tmp_path), request.param.version)


# --------------------------------------------------------------------------- driving a pane

# Codex treats characters arriving in a fast burst as a paste and turns an Enter inside that
# burst into a newline. Waiting for the text to render and then this long is the harness's own
# input protocol (like a human's pause), not a test synchronisation delay.
PASTE_BURST_SETTLE_SECONDS = 0.3

CLAUDE_IDLE = "? for shortcuts"
CLAUDE_BUSY = "esc to interrupt"
CLAUDE_PERMISSION = "Do you want to proceed?"
CODEX_IDLE = "? for shortcuts"
CODEX_READY = "Ask Codex to do anything"
CODEX_BUSY = "esc to interrupt"


def _title_spinning(title: str) -> bool:
    return bool(title) and ("\u2800" <= title[0] <= "\u28ff" or title.startswith("[ ! ]"))


def wait_for_codex_ready(tmux: TmuxServer, pane: str, *, timeout: float = 30.0) -> str:
    """Wait until the Codex TUI is at its prompt and done starting up: the composer and footer
    show, and the pane title no longer carries a spinner (it spins while MCP servers start,
    and a prompt typed then is queued, not sent). Return the screen."""
    screen = tmux.wait_for(pane, CODEX_READY, CODEX_IDLE, "stub-model", timeout=timeout)
    wait_until(
        lambda: not _title_spinning(tmux.pane_field(pane, "pane_title")),
        timeout=timeout,
        what=f"codex in {pane} to finish starting",
    )
    return screen


def type_prompt(tmux: TmuxServer, pane: str, text: str, *, timeout: float = 10.0) -> None:
    """Type ``text`` into the composer and wait until it shows (no Enter)."""
    tmux.send_text(pane, text)
    tmux.wait_for(pane, text[:40], timeout=timeout)


def submit_prompt(tmux: TmuxServer, pane: str, text: str, *, timeout: float = 10.0) -> None:
    """Type ``text``, wait for it to render, pause past Codex's paste-burst window, Enter."""
    type_prompt(tmux, pane, text, timeout=timeout)
    time.sleep(PASTE_BURST_SETTLE_SECONDS)
    tmux.keys(pane, "Enter")


# How long one key to a dialog is given to take effect before it is pressed again.
DIALOG_KEY_WAIT = 2.0


def answer_dialog(
    tmux: TmuxServer, pane: str, dialog: str, key: str = "Enter", *, timeout: float = 30.0
) -> None:
    """Press ``key`` in the dialog showing ``dialog`` until the dialog is gone. Claude Code
    2.1.224 and later ignore keys for a moment after a permission dialog opens (so a key meant
    for the composer does not answer it): a key that lands in that moment is pressed again."""

    def answered() -> bool:
        tmux.keys(pane, key)
        try:
            tmux.wait_for(pane, absent=[dialog], timeout=DIALOG_KEY_WAIT)
        except AssertionError:
            return False
        return True

    wait_until(answered, timeout=timeout, what=f"the dialog {dialog!r} in {pane} to take {key}")


__all__: Sequence[str] = (
    "PINS",
    "ClaudeHarness",
    "CodexHarness",
    "Pin",
    "answer_dialog",
    "claude",
    "codex",
    "harness_binary",
    "make_claude",
    "make_codex",
    "pin",
    "pin_params",
    "pins",
    "require_binary",
    "submit_prompt",
    "type_prompt",
    "wait_for_codex_ready",
    "workdir",
)
