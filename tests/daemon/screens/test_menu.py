"""A screen waiting for a person is read as a menu: question, detail, options with their keys."""

from __future__ import annotations

from pathlib import Path

from openbus.daemon.screens import Evidence, parse

CASES = Path(__file__).parent / "cases"
RULE = "─" * 40


def claude_dialog(command: str, wrapped: bool = False) -> str:
    second = (
        ["   2. Yes, and always allow access to a very long folder name", "      from this project"]
        if wrapped
        else ["   2. Yes, and always allow access to ~/src/app from this project"]
    )
    return "\n".join(
        [
            "● I will run it.",
            RULE,
            " Bash command",
            "",
            f"   {command}",
            "",
            " Do you want to proceed?",
            " ❯ 1. Yes",
            *second,
            "   3. No",
            "",
            " Esc to cancel · Tab to amend",
        ]
    )


def test_claude_codes_permission_prompt_is_a_menu_whose_options_are_picked_by_number() -> None:
    reading = parse(claude_dialog("touch made.txt"), Evidence(harness="claude"))
    assert reading.state == "menu" and reading.menu is not None
    assert reading.menu.question == "Do you want to proceed?"
    assert [(o.key, o.label) for o in reading.menu.options] == [
        ("1", "Yes"),
        ("2", "Yes, and always allow access to ~/src/app from this project"),
        ("3", "No"),
    ]
    assert reading.menu.detail == "Bash command · touch made.txt"
    assert "● I will run it." not in reading.menu.detail  # the dialog ends at its rule


def test_a_wrapped_option_label_is_joined() -> None:
    reading = parse(claude_dialog("ls", wrapped=True), Evidence(harness="claude"))
    assert reading.menu is not None
    assert reading.menu.options[1].label == (
        "Yes, and always allow access to a very long folder name from this project"
    )
    assert len(reading.menu.options) == 3


def test_the_same_question_about_another_command_has_another_fingerprint() -> None:
    one = parse(claude_dialog("touch a.txt"), Evidence(harness="claude")).menu
    other = parse(claude_dialog("rm -rf build"), Evidence(harness="claude")).menu
    again = parse(claude_dialog("touch a.txt"), Evidence(harness="claude")).menu
    assert one is not None and other is not None and again is not None
    assert one.question == other.question
    assert one.fingerprint() != other.fingerprint()
    assert one.fingerprint() == again.fingerprint()
    assert one.to_dict()["fingerprint"] == one.fingerprint()


def test_an_idle_screen_or_a_slash_command_list_has_no_menu() -> None:
    for name in ("claude-idle", "claude-slash-menu", "codex-idle"):
        text = (CASES / f"{name}.txt").read_text()
        assert parse(text, Evidence(harness=name.split("-")[0])).menu is None, name
