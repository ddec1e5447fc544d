"""The daemon's config: embedded defaults, strict validation naming key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from openbus.daemon.config import load_config, parse_config, resolve_config_path
from openbus.kernel.errors import ConfigError


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
    ("content", "says"), [(b"[daemon\n", "not valid TOML"), (b"\xff\xfe", "not UTF-8")]
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
