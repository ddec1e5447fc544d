"""The daemon's config: embedded defaults, strict validation naming key and file."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from openbus.daemon.config import Config, load_config, parse_config, resolve_config_path
from openbus.kernel.errors import ConfigError
from tests.support.daemon import write_config
from tests.support.policy import signed_policy


def parse(data: dict[str, object]) -> object:
    return parse_config(data, "/etc/openbus/test.toml")


def test_no_file_means_the_embedded_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPENBUS_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing"))
    config = load_config(None)
    assert config.daemon.listen == "127.0.0.1:7707"
    assert config.tmux.socket is None
    assert {"claude", "codex", "opencode", "gemini", "omp", "shell"} <= set(config.launchers)
    assert config.launchers["claude"].structured and config.launchers["claude"].resume


def test_the_flag_wins_over_the_environment_which_wins_over_the_user_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    user = tmp_path / "xdg" / "openbus" / "openbus.toml"
    user.parent.mkdir(parents=True)
    user.write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("OPENBUS_CONFIG", raising=False)
    assert resolve_config_path(None) == user
    monkeypatch.setenv("OPENBUS_CONFIG", "/from/env.toml")
    assert resolve_config_path(None) == Path("/from/env.toml")
    assert resolve_config_path("/from/flag.toml") == Path("/from/flag.toml")


@pytest.mark.parametrize(
    ("data", "key", "says"),
    [
        ({"daemon": {"colour": "blue"}}, "daemon.colour", "unknown key"),
        ({"bogus": {}}, "bogus", "unknown key"),
        ({"daemon": {"listen": "7707"}}, "daemon.listen", "HOST:PORT"),
        ({"daemon": {"listen": "127.0.0.1:99999"}}, "daemon.listen", "HOST:PORT"),
        ({"daemon": {"listen": 7707}}, "daemon.listen", "a string"),
        ({"audit": {"otlp_protocol": "udp"}}, "audit.otlp_protocol", "grpc"),
        ({"audit": {"checkpoint_every": 0}}, "audit.checkpoint_every", "positive"),
        ({"audit": {"checkpoint_every": True}}, "audit.checkpoint_every", "boolean"),
        ({"history": {"codex_homes": "~/.codex"}}, "history.codex_homes", "a list"),
        ({"launchers": {"x": {"argv": ["x"]}}}, "launchers.x.harness", "needs a harness"),
        ({"launchers": {"x": {"harness": "claude"}}}, "launchers.x.argv", "non-empty argv"),
        (
            {"launchers": {"x": {"harness": "vim", "argv": ["vim"]}}},
            "launchers.x.harness",
            "one of",
        ),
        (
            {"launchers": {"x": {"command": "codex", "argv": ["codex"]}}},
            "launchers.x.argv",
            "opaque",
        ),
        (
            {"launchers": {"x": {"harness": "codex", "argv": ["codex"], "env": {"A": 1}}}},
            "launchers.x.env.A",
            "strings",
        ),
        ({"hosted": {"enabled": "yes"}}, "hosted.enabled", "true or false"),
        ({"hosted": {"agent_isolation": "none"}}, "hosted.agent_isolation", "pool, shared"),
    ],
)
def test_a_bad_key_or_value_names_the_key_and_the_file(
    data: dict[str, object], key: str, says: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert err.value.key == key
    assert "/etc/openbus/test.toml" in err.value.message and says in err.value.message


def test_structured_and_opaque_launchers_are_told_apart() -> None:
    config = parse_config(
        {
            "launchers": {
                "review": {
                    "harness": "claude",
                    "argv": ["claude", "--model", "opus"],
                    "env": {"A": "b"},
                    "cwd": "~/src",
                },
                "legacy": {"command": "cd ~/src && codex"},
            }
        },
        "<test>",
    )
    review, legacy = config.launchers["review"], config.launchers["legacy"]
    assert (
        review.structured
        and review.argv == ("claude", "--model", "opus")
        and review.env == {"A": "b"}
    )
    assert review.cwd == Path("~/src").expanduser()
    assert not legacy.structured and legacy.harness == "unknown"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"[daemon\n", "not valid TOML"),
        (b"\xff\xfe", "not UTF-8"),
        (b"a = " + b"[" * 100_000 + b"]" * 100_000, "nested deeper than the reader goes"),
    ],
)
def test_an_unreadable_file_is_a_clear_error(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=says) as err:
        load_config(str(path))
    assert str(path) in err.value.message


def test_a_missing_file_named_on_the_command_line_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "missing.toml"))


# ------------------------------------------------------------------- through `openbus serve`


def serve_refuses(config: Path, env: dict[str, str] | None = None) -> str:
    """Run the real ``openbus serve`` on ``config``; it must stop before gunicorn starts, with
    one line on stderr and no traceback. Returns that line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "openbus.daemon.cli", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise AssertionError("openbus serve started: the config was accepted") from None
    assert process.returncode != 0, out + err
    assert "Traceback" not in err and "gunicorn" not in (out + err).lower(), err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def daemon_section(tmp_path: Path, **values: object) -> dict[str, object]:
    return {
        "listen": "127.0.0.1:1",
        "socket": str(tmp_path / "run" / "d.sock"),
        "state_dir": str(tmp_path / "state"),
        **values,
    }


LONG = "x" * 110

REFUSED: list[tuple[str, dict[str, dict[str, object]], str, str]] = [
    ("listen on every address", {"daemon": {"listen": "0.0.0.0:7707"}}, "daemon.listen", "/mcp"),
    (
        "listen on a LAN address",
        {"daemon": {"listen": "192.0.2.7:7707"}},
        "daemon.listen",
        "allow_remote",
    ),
    (
        "listen on a host name",
        {"daemon": {"listen": "box.example:7707"}},
        "daemon.listen",
        "loopback",
    ),
    (
        "the human's page off loopback, even with allow_remote",
        {"daemon": {"web_listen": "0.0.0.0:7708", "allow_remote": True}},
        "daemon.web_listen",
        "loopback",
    ),
    (
        "the human's page on the agents' port",
        {"daemon": {"listen": "127.0.0.1:7707", "web_listen": "127.0.0.1:7707"}},
        "daemon.web_listen",
        "agents' port",
    ),
    (
        "a nan duration",
        {"audit": {"checkpoint_seconds": math.nan}},
        "audit.checkpoint_seconds",
        "finite",
    ),
    (
        "an inf duration",
        {"hosted": {"signature_window_seconds": math.inf}},
        "hosted.signature_window_seconds",
        "finite",
    ),
    (
        "an endpoint that is no URL",
        {"audit": {"otlp_endpoint": "not a url"}},
        "audit.otlp_endpoint",
        "http:// or https://",
    ),
    (
        "an endpoint with a bad port",
        {"audit": {"otlp_endpoint": "http://c:99999"}},
        "audit.otlp_endpoint",
        "port",
    ),
    (
        "an org key with no policy",
        {"policy": {"org_public_key": "/etc/openbus/org.pub"}},
        "policy.file",
        "org_public_key",
    ),
    (
        "a policy with no org key",
        {"policy": {"file": "/etc/openbus/policy.toml"}},
        "policy.org_public_key",
        "pinned public key",
    ),
    (
        "a too long daemon socket",
        {"daemon": {"socket": f"/tmp/{LONG}/d.sock"}},
        "daemon.socket",
        "107",
    ),
    ("a too long tmux socket", {"tmux": {"socket": f"/tmp/{LONG}/t.sock"}}, "tmux.socket", "107"),
]


@pytest.mark.parametrize(("name", "sections", "key", "says"), REFUSED, ids=[r[0] for r in REFUSED])
def test_openbus_serve_refuses_in_one_line_naming_key_and_file(
    tmp_path: Path, name: str, sections: dict[str, dict[str, object]], key: str, says: str
) -> None:
    merged = {"daemon": daemon_section(tmp_path, **sections.get("daemon", {}))}
    merged.update({k: v for k, v in sections.items() if k != "daemon"})
    config = write_config(tmp_path / "openbus.toml", merged)
    line = serve_refuses(config)
    assert f"{config}: {key}: " in line and says in line, line


def test_a_defaulted_socket_path_too_long_names_the_key_to_set(tmp_path: Path) -> None:
    state = tmp_path / LONG
    config = write_config(
        tmp_path / "openbus.toml", {"daemon": {"listen": "127.0.0.1:1", "state_dir": str(state)}}
    )
    line = serve_refuses(config, env={"XDG_RUNTIME_DIR": str(tmp_path / "no-runtime-dir")})
    assert f"{config}: daemon.socket: the default socket path" in line, line
    assert "set daemon.socket to a shorter path" in line


def test_a_missing_otlp_headers_file_is_one_line_before_gunicorn_starts(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "openbus.toml",
        {
            "daemon": daemon_section(tmp_path),
            "audit": {
                "otlp_endpoint": "http://127.0.0.1:4317",
                "otlp_headers_file": str(tmp_path / "no-such-headers"),
            },
        },
    )
    line = serve_refuses(config)
    assert f"{config}: audit.otlp_headers_file: " in line and "no-such-headers" in line, line


def test_a_missing_credential_file_named_by_the_policy_names_the_policy(tmp_path: Path) -> None:
    text = (
        'org = "test"\nversion = 1\nissued = "2026-11-30T00:00:00Z"\n[audit]\n'
        f'endpoint = "http://127.0.0.1:4317"\ncredential_file = "{tmp_path / "nope"}"\n'
    )
    policy = signed_policy(tmp_path / "org", text)
    config = write_config(
        tmp_path / "openbus.toml", {"daemon": daemon_section(tmp_path), "policy": policy}
    )
    line = serve_refuses(config)
    assert f"{policy['file']}: audit.credential_file: " in line, line


def test_the_humans_page_is_on_loopback_7708_by_default_and_an_empty_value_turns_it_off() -> None:
    default = parse({})
    assert isinstance(default, Config) and default.daemon.web_listen == "127.0.0.1:7708"
    off = parse({"daemon": {"web_listen": ""}})
    assert isinstance(off, Config) and off.daemon.web_listen is None


def test_remote_listening_is_accepted_when_meant_and_loopback_always() -> None:
    remote = parse({"daemon": {"listen": "0.0.0.0:7707", "allow_remote": True}})
    assert isinstance(remote, Config) and remote.daemon.allow_remote
    for listen in ("127.0.0.1:7707", "127.0.0.2:1", "[::1]:7707", "localhost:7707"):
        config = parse({"daemon": {"listen": listen}})
        assert isinstance(config, Config) and not config.daemon.allow_remote
    config = parse({"audit": {"otlp_endpoint": "https://collector.example:4317"}})
    assert isinstance(config, Config) and config.audit.otlp_endpoint


def test_control_runs_a_configured_launcher_claude_code_by_default() -> None:
    default = parse_config({}, "<test>")
    assert (default.control.launcher, default.control.reseed_tokens) == ("claude", 150_000)
    chosen = parse_config(
        {
            "launchers": {"boss": {"harness": "codex", "argv": ["codex"]}},
            "control": {"launcher": "boss", "reseed_tokens": 5000},
        },
        "<test>",
    )
    assert (chosen.control.launcher, chosen.control.reseed_tokens) == ("boss", 5000)
    with pytest.raises(ConfigError, match=r"control\.launcher.*no launcher named 'nope'"):
        parse_config({"control": {"launcher": "nope"}}, "<test>")
    with pytest.raises(ConfigError, match="reseed_tokens"):
        parse_config({"control": {"reseed_tokens": 0}}, "<test>")
