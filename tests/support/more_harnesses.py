"""Launching the real OpenCode, omp and Gemini CLI against a ``StubModel``.

Each pinned version (``HARNESS_PINS``: ``opencode-*``, ``omp-*``, ``gemini-*``) is found the way
``tests.support.harnesses`` finds Claude Code's and Codex's, and runs fully offline with a
private ``HOME`` under the test's tmp dir:

* OpenCode: a config file named by ``OPENCODE_CONFIG`` with one provider ``stub``
  (``@ai-sdk/openai-compatible``, bundled in the binary) whose ``baseURL`` is the stub's
  ``/v1``; it speaks Chat Completions. Autoupdate, sharing and LSP downloads are off.
* omp: ``$HOME/.omp/agent/models.yml`` with a provider ``stub`` (``api: openai-completions``,
  its key read from ``STUB_KEY``) and ``config.yml`` turning off the first-run setup wizard,
  the splash and the update check; Chat Completions too. The CLI is a Bun script, so the
  pin's prefix carries ``bun`` and its ``.bin`` leads ``PATH``.
* Gemini CLI: ``$HOME/.gemini/settings.json`` choosing API-key auth with telemetry and update
  checks off, ``GEMINI_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL`` (the stub's root) in the
  environment, the workspace trusted by ``GEMINI_CLI_TRUST_WORKSPACE``; it calls
  ``/v1beta/models/MODEL:streamGenerateContent``.

Each asks before a shell command (OpenCode ``permission.bash = "ask"``, omp
``tools.approvalMode = always-ask``, Gemini's default), so a test gets a permission prompt.

``Harness.tui_argv()`` starts the TUI, ``print_argv(prompt)`` runs one prompt and exits;
``MARKERS`` has the screen texts a test waits for, ``SHELL_CALL`` the model-facing shell tool
call that raises the permission prompt, ``EXIT`` the command that quits.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.support.harnesses import _base_env, pin, require_binary
from tests.support.stub_model import StubModel

Name = Literal["opencode", "omp", "gemini"]
NAMES: tuple[Name, ...] = ("opencode", "omp", "gemini")
STUB_MODEL = "stub-model"
GEMINI_MODEL = "gemini-2.5-flash"
STUB_KEY = "sk-stub-chat-0123456789"
GEMINI_KEY = "stub-gemini-key-0123456789"
NO_REGISTRY = "http://127.0.0.1:9/"  # the discard port: nothing listens, a connect is refused


@dataclass
class Harness:
    name: Name
    version: str
    binary: Path
    home: Path
    cwd: Path
    stub: StubModel
    env_vars: dict[str, str] = field(default_factory=dict)
    model_args: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.name}-{self.version}"

    def env(self, **extra: str) -> dict[str, str]:
        return {**_base_env(self.home, self.binary), **self.env_vars, **extra}

    @property
    def command(self) -> list[str]:
        """How the CLI is started. omp's is a ``#!/usr/bin/env bun`` script; a tmux pane's
        ``PATH`` comes from tmux, not from ``-e``, so its Bun is named here (the process is
        ``bun …/omp`` either way)."""
        if self.name == "omp":
            return [str(self.binary.parent / "bun"), str(self.binary.resolve())]
        return [str(self.binary)]

    def tui_argv(self, *extra: str) -> list[str]:
        return [*self.command, *self.model_args, *extra]

    def print_argv(self, prompt: str, *extra: str) -> list[str]:
        if self.name == "opencode":
            return [*self.command, "run", *self.model_args, *extra, prompt]
        return [*self.command, *self.model_args, *extra, "-p", prompt]

    # ---- where each keeps its sessions

    @property
    def data_dir(self) -> Path:
        """OpenCode's ``opencode.db``, omp's ``sessions/``, Gemini's ``tmp/<project>/chats``."""
        return {
            "opencode": self.home / ".local" / "share" / "opencode",
            "omp": self.home / ".omp" / "agent",
            "gemini": self.home / ".gemini",
        }[self.name]


def _opencode(harness: Harness, root: Path) -> None:
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stub",
                "options": {"baseURL": harness.stub.openai_base_url, "apiKey": "{env:STUB_KEY}"},
                "models": {STUB_MODEL: {"name": "Stub Model"}},
            }
        },
        "model": f"stub/{STUB_MODEL}",
        "small_model": f"stub/{STUB_MODEL}",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"bash": "ask"},  # a shell call asks, as omp's and Gemini's do
    }
    path = root / "opencode-config.json"
    path.write_text(json.dumps(config, indent=2))
    harness.env_vars.update(
        OPENCODE_CONFIG=str(path),
        STUB_KEY=STUB_KEY,
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        # at start it installs its plugin package into its config dir from the npm registry
        # (with OPENCODE_PURE too); refused here, it starts all the same
        npm_config_registry=NO_REGISTRY,
        BUN_CONFIG_REGISTRY=NO_REGISTRY,
    )


def _omp(harness: Harness, root: Path) -> None:
    agent = harness.home / ".omp" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    provider = {
        "baseUrl": harness.stub.openai_base_url,
        "apiKey": "STUB_KEY",
        "api": "openai-completions",
        "models": [{"id": STUB_MODEL, "name": "Stub Model"}],
    }
    (agent / "models.yml").write_text(json.dumps({"providers": {"stub": provider}}, indent=2))
    startup = {"setupWizard": False, "checkUpdate": False, "showSplash": False}
    settings = {"startup": startup, "tools": {"approvalMode": "always-ask"}}
    (agent / "config.yml").write_text(json.dumps(settings, indent=2))
    harness.env_vars.update(STUB_KEY=STUB_KEY)
    harness.model_args = ("--model", f"stub/{STUB_MODEL}")


def _gemini(harness: Harness, root: Path) -> None:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    folder = harness.home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    harness.env_vars.update(
        GEMINI_API_KEY=GEMINI_KEY,
        GOOGLE_GEMINI_BASE_URL=harness.stub.url,
        GEMINI_CLI_TRUST_WORKSPACE="true",
    )
    harness.model_args = ("-m", GEMINI_MODEL)


_SEED = {"opencode": _opencode, "omp": _omp, "gemini": _gemini}


def make_harness(
    name: Name, root: Path, stub: StubModel, cwd: Path, version: str | None = None
) -> Harness:
    """``name`` at the pinned ``version`` (None: the one in use) configured against ``stub``,
    with a private home under ``root``, for a run in ``cwd``."""
    version = pin(name, version).version
    binary = require_binary(name, version)
    home = root / f"{name}-home"
    home.mkdir(parents=True, exist_ok=True)
    harness = Harness(name, version, binary, home, cwd, stub)
    _SEED[name](harness, root)
    return harness


@dataclass(frozen=True)
class Markers:
    ready: tuple[str, ...]  # the TUI is at its composer
    busy: str  # a turn is running
    menu: str  # the permission prompt for a shell command


MARKERS = {
    "opencode": Markers(("ctrl+p", "Ask anything"), "esc interrupt", "Permission required"),
    "omp": Markers((" π > ", "╰─"), "Working…", "Allow tool:"),
    "gemini": Markers(("Type your message",), "esc to cancel", "Allow execution of"),
}
SHELL_TOOL = {"opencode": "bash", "omp": "bash", "gemini": "run_shell_command"}
EXIT = {"opencode": "/exit", "omp": "/exit", "gemini": "/quit"}


def run_print(harness: Harness, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run one prompt in print mode in the harness's cwd; fail with its stderr if it fails."""
    done = subprocess.run(
        harness.print_argv(prompt, *extra),
        env=harness.env(),
        cwd=harness.cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def shell_call(name: Name, command: str) -> tuple[str, dict[str, Any]]:
    """The (tool, arguments) a model sends to run ``command`` in ``name``'s shell tool."""
    return SHELL_TOOL[name], {"command": command, "description": "run a command"}
