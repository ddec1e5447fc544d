"""The policy schema: what a valid policy says, and errors that name field and line."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from openbus.kernel.limits import BUILTIN_MAXIMA, Limits
from openbus.kernel.scopes import Preset
from openbus.policy.errors import PolicyInvalid, SchemaIssue
from openbus.policy.schema import KeyLines, parse_policy

FULL = """\
org = "example"
version = 3
issued = "2026-11-30T00:00:00Z"

[caps]
default = "observe"          # off | observe | collaborate

[caps.users]
alice = "collaborate"
"svc.bot" = "off"

[caps.groups]
admins = "collaborate"

[harnesses]
allowed = ["claude", "codex"]

[audit]
export_required = true
endpoint = "https://collector.example:4317"
protocol = "http/protobuf"
credential_file = "/etc/openbus/otlp-headers"

[limits]
message_bytes = 8192
hop_limit = 0

[hosted]
connect_default = "off"
control = "connected"
"""


def issues_of(text: str) -> list[SchemaIssue]:
    with pytest.raises(PolicyInvalid) as caught:
        parse_policy(text.encode(), "policy.toml")
    return list(caught.value.issues)


def only_issue(text: str) -> SchemaIssue:
    issues = issues_of(text)
    assert len(issues) == 1, issues
    return issues[0]


def test_the_issue_example_parses_into_a_policy() -> None:
    policy = parse_policy(FULL.encode(), "policy.toml")
    assert policy.org == "example" and policy.version == 3
    assert policy.issued == datetime(2026, 11, 30, tzinfo=UTC)
    assert policy.default_cap is Preset.OBSERVE
    assert policy.user_caps == {"alice": Preset.COLLABORATE, "svc.bot": Preset.OFF}
    assert policy.group_caps == {"admins": Preset.COLLABORATE}
    assert policy.harnesses == frozenset({"claude", "codex"})
    assert policy.harness_allowed("codex") and not policy.harness_allowed("gemini")
    assert policy.audit.required and policy.audit.protocol == "http/protobuf"
    assert policy.audit.endpoint == "https://collector.example:4317"
    assert str(policy.audit.credential_file) == "/etc/openbus/otlp-headers"
    assert policy.limits == Limits(message_bytes=8192, hop_limit=0)
    assert policy.hosted.connect_default is Preset.OFF and policy.hosted.control == "connected"


def test_a_minimal_policy_caps_everyone_at_off_and_keeps_built_in_limits() -> None:
    policy = parse_policy(b'org = "o"\nversion = 1\nissued = 2026-01-01T00:00:00Z\n', "p")
    assert policy.default_cap is Preset.OFF
    assert policy.harnesses is None and policy.harness_allowed("gemini")
    assert policy.limits == Limits()
    assert not policy.audit.required
    assert policy.hosted.connect_default is Preset.OFF and policy.hosted.control == "connected"


def test_a_limit_above_its_built_in_maximum_is_refused_with_field_and_line() -> None:
    text = FULL.replace("message_bytes = 8192", "message_bytes = 65536")
    issue = only_issue(text)
    assert issue.field == "limits.message_bytes"
    assert issue.line == 25
    assert "8192" in issue.message and "tighten" in issue.message


@pytest.mark.parametrize("name", sorted(BUILTIN_MAXIMA))
def test_no_limit_may_be_loosened_by_even_one(name: str) -> None:
    text = (
        'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n\n[limits]\n'
        f"{name} = {BUILTIN_MAXIMA[name] + 1}\n"
    )
    issue = only_issue(text)
    assert (issue.field, issue.line) == (f"limits.{name}", 6)
    assert "tighten" in issue.message


def test_a_limit_at_its_built_in_maximum_is_accepted() -> None:
    body = "\n".join(f"{k} = {v}" for k, v in BUILTIN_MAXIMA.items())
    text = 'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n[limits]\n' + body + "\n"
    assert parse_policy(text.encode(), "p").limits == Limits()


def test_every_error_is_reported_each_with_its_field_and_line() -> None:
    text = """\
org = "example"
version = 0
issued = "yesterday"
colour = "blue"
[caps]
default = "everything"
[caps.users]
bob = "admin"
[caps.groups]
"bad group!" = "observe"
[limits]
hop_limit = true
[audit]
export_required = true
protocol = "carrier-pigeon"
"""
    found = {(i.field, i.line) for i in issues_of(text)}
    assert found == {
        ("version", 2),
        ("issued", 3),
        ("colour", 4),
        ("caps.default", 6),
        ("caps.users.bob", 8),
        ('caps.groups."bad group!"', 10),
        ("limits.hop_limit", 12),
        ("audit.endpoint", 13),  # missing: reported at its table's header
        ("audit.protocol", 15),
    }


@pytest.mark.parametrize(
    ("extra", "field", "line"),
    [
        ("[caps]\nmaximum = 'observe'\n", "caps.maximum", 5),
        ("[audit]\nendpoint_url = 'https://x'\n", "audit.endpoint_url", 5),
        ("[hosted]\nconnect = 'off'\n", "hosted.connect", 5),
        ("[harnesses]\ndenied = []\n", "harnesses.denied", 5),
        ("[limits]\nmessages_per_day = 3\n", "limits.messages_per_day", 5),
        ("[network]\nallow = true\n", "network", 4),
    ],
)
def test_unknown_keys_are_errors_at_every_level(extra: str, field: str, line: int) -> None:
    base = 'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n'
    issue = only_issue(base + extra)
    assert (issue.field, issue.line) == (field, line)
    assert issue.message == "unknown key"


def test_missing_required_top_level_keys_are_named() -> None:
    fields = {i.field for i in issues_of("[caps]\ndefault = 'off'\n")}
    assert fields == {"org", "version", "issued"}


def test_a_toml_syntax_error_names_its_line() -> None:
    issue = only_issue('org = "o"\nversion = 1\nversion = 2\n')
    assert issue.line == 3


def test_values_nested_past_the_reader_are_a_syntax_issue_not_a_crash() -> None:
    issue = only_issue('org = "o"\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    assert (issue.field, issue.line) == ("(syntax)", 1)
    assert "nested deeper" in issue.message


def test_a_timestamp_without_timezone_is_refused() -> None:
    issue = only_issue('org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00"\n')
    assert (issue.field, issue.line) == ("issued", 3)
    assert "timezone" in issue.message


def test_harnesses_must_be_known_names() -> None:
    text = (
        'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n'
        '[harnesses]\nallowed = [\n  "claude",\n  "vim",\n]\n'
    )
    issue = only_issue(text)
    assert issue.field == "harnesses.allowed" and issue.line == 5 and "vim" in issue.message


def test_the_audit_endpoint_must_be_a_url_and_the_credential_path_absolute() -> None:
    text = (
        'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n[audit]\n'
        'endpoint = "collector:4317"\ncredential_file = "headers.txt"\n'
    )
    found = {(i.field, i.line) for i in issues_of(text)}
    assert found == {("audit.endpoint", 5), ("audit.credential_file", 6)}


def test_the_error_message_names_the_file_and_each_line() -> None:
    text = FULL.replace('default = "observe"', 'default = "all"').replace(
        "hop_limit = 0", "hop_limit = 9"
    )
    with pytest.raises(PolicyInvalid) as caught:
        parse_policy(text.encode(), "/etc/openbus/policy.toml")
    message = caught.value.message
    assert message.startswith("/etc/openbus/policy.toml: ")
    assert "line 6: caps.default" in message and "line 26: limits.hop_limit" in message
    assert "\n" not in message


def test_non_utf8_bytes_are_refused_with_a_line() -> None:
    with pytest.raises(PolicyInvalid) as caught:
        parse_policy(b'org = "o"\nversion = 1\nx = "\xff"\n', "p")
    assert caught.value.issues[0].line == 3


class TestKeyLines:
    def test_keys_under_headers_dotted_keys_and_quoted_keys_find_their_lines(self) -> None:
        lines = KeyLines(
            '# comment\n[caps]\nusers.alice = "observe"\n'
            '[ caps . "groups" ]\n"dev team" = "off"\n\'raw\' = "off"\n'
        )
        assert lines.line_of(("caps", "users", "alice")) == 3
        assert lines.line_of(("caps", "groups", "dev team")) == 5
        assert lines.line_of(("caps", "groups", "raw")) == 6
        assert lines.line_of(("caps", "groups")) == 4
        assert lines.line_of(("caps", "groups", "missing")) == 4

    def test_an_inline_table_reports_its_members_at_its_own_line(self) -> None:
        lines = KeyLines('[caps]\ndefault = "off"\nusers = { alice = "observe" }\n')
        assert lines.line_of(("caps", "users", "alice")) == 3

    def test_lines_inside_a_multiline_string_are_not_keys(self) -> None:
        lines = KeyLines('note = """\nfake = 1\n"""\nreal = 2\n')
        assert lines.line_of(("fake",)) == 1
        assert lines.line_of(("real",)) == 4

    def test_an_unknown_key_with_no_line_falls_back_to_line_one(self) -> None:
        assert KeyLines("").line_of("org") == 1


def test_a_policy_file_on_disk_parses_from_its_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(FULL)
    assert parse_policy(path.read_bytes(), str(path)).lines[("caps", "users", "alice")] == 9


FINGERPRINT = "sha256:" + "ab" * 32


def test_audit_key_fingerprints_pin_each_boxs_key() -> None:
    text = (
        'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n'
        "[audit.key_fingerprints]\n"
        f'"box-1.example" = "{FINGERPRINT}"\n'
        f'box-2 = ["{FINGERPRINT}", "sha256:{"cd" * 32}"]\n'
    )
    audit = parse_policy(text.encode(), "p").audit
    assert audit.key_fingerprints == {
        "box-1.example": frozenset({FINGERPRINT}),
        "box-2": frozenset({FINGERPRINT, "sha256:" + "cd" * 32}),
    }
    assert audit.to_dict()["key_fingerprints"]["box-2"] == sorted(audit.key_fingerprints["box-2"])
    minimal = parse_policy(b'org = "o"\nversion = 1\nissued = 2026-01-01T00:00:00Z\n', "p")
    assert minimal.audit.key_fingerprints == {}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('"ab12"', "not an audit key fingerprint"),
        (f'"{FINGERPRINT.upper()}"', "not an audit key fingerprint"),
        (f'"md5:{"ab" * 32}"', "not an audit key fingerprint"),
        ("[]", "at least one fingerprint"),
        (f'["{FINGERPRINT}", 7]', "7 is not an audit key fingerprint"),
    ],
)
def test_a_malformed_audit_key_fingerprint_is_refused_with_field_and_line(
    value: str, says: str
) -> None:
    text = (
        'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n'
        f"[audit]\nexport_required = false\n[audit.key_fingerprints]\nbox-1 = {value}\n"
    )
    issue = only_issue(text)
    assert (issue.field, issue.line) == ("audit.key_fingerprints.box-1", 7)
    assert says in issue.message


def test_audit_key_fingerprints_must_be_a_table() -> None:
    text = (
        'org = "o"\nversion = 1\nissued = "2026-01-01T00:00:00Z"\n'
        f'[audit]\nkey_fingerprints = "{FINGERPRINT}"\n'
    )
    issue = only_issue(text)
    assert (issue.field, issue.line) == ("audit.key_fingerprints", 5)
