"""The policy file's TOML schema: parsing and validation that names field and line.

Theory of operation
-------------------
``parse_policy(raw, path)`` turns the exact file bytes into a ``Policy`` or raises
``PolicyInvalid`` listing *every* problem found, each with its dotted field and its line.
``tomllib`` reports no line numbers for values, so ``KeyLines`` scans the source text itself:
it follows ``[table]`` headers and ``key = value`` lines (bare, quoted and dotted keys) and
records the line where each full dotted key is written. A field that is not written anywhere
(a missing required key) is reported at its table's header line, or line 1 for top-level keys.
Values inside one-line inline tables are reported at the line of the inline table.

The schema (everything else is an error, including unknown keys)::

    org = "example"                      # required: [A-Za-z0-9][A-Za-z0-9._-]*
    version = 3                          # required: integer >= 1
    issued = "2026-11-30T00:00:00Z"      # required: RFC 3339 with a timezone (or a TOML datetime)

    [caps]
    default = "observe"                  # off | observe | collaborate (default "off")
    [caps.users]                         # user name = preset
    [caps.groups]                        # group name = preset

    [harnesses]
    allowed = ["claude", "codex"]        # absent: every harness is allowed

    [audit]
    export_required = true               # default false
    endpoint = "https://collector:4317"  # required when export_required
    protocol = "grpc"                    # grpc | http/protobuf
    credential_file = "/etc/openbus/otlp-headers"   # absolute path

    [audit.key_fingerprints]             # box name = its audit key's fingerprint
    "box-1" = "sha256:<64 hex digits>"   # what `openbus audit key` prints on that box
    "box-2" = ["sha256:...", "sha256:..."]   # several while the box's key is replaced

    [limits]                             # each may only lower a built-in maximum
    message_bytes = 8192                 # see openbus.kernel.limits

    [hosted]
    connect_default = "off"              # the preset new agents start with
    control = "connected"                # connected | off
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from openbus.kernel import toml
from openbus.kernel.harnesses import HARNESSES, OTLP_PROTOCOLS
from openbus.kernel.limits import BUILTIN_MAXIMA, MINIMA, Limits
from openbus.kernel.scopes import Preset
from openbus.kernel.urls import url_problem
from openbus.policy.errors import PolicyInvalid, SchemaIssue
from openbus.policy.model import AuditExport, HostedDefaults, Policy, dotted

PRESETS = tuple(p.value for p in Preset)
CONTROL_MODES = ("connected", "off")

_ORG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# POSIX-portable user and group names, a little more lenient (upper case, trailing $).
_ACCOUNT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,255}\$?$")
# An audit key's fingerprint, as ``openbus.daemon.audit.checkpoints.fingerprint`` writes it.
_FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")

_TABLES: Mapping[str, frozenset[str]] = {
    "": frozenset({"org", "version", "issued", "caps", "harnesses", "audit", "limits", "hosted"}),
    "caps": frozenset({"default", "users", "groups"}),
    "harnesses": frozenset({"allowed"}),
    "audit": frozenset(
        {"export_required", "endpoint", "protocol", "credential_file", "key_fingerprints"}
    ),
    "limits": frozenset(BUILTIN_MAXIMA),
    "hosted": frozenset({"connect_default", "control"}),
}


# --------------------------------------------------------------------------- line finding


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _parse_key(text: str, pos: int) -> tuple[list[str], int] | None:
    """Parse a (dotted) TOML key at ``pos``; return its parts and the position after it."""
    parts: list[str] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            return None
        quote = text[pos]
        if quote in "\"'":
            end = pos + 1
            buf: list[str] = []
            while end < n and text[end] != quote:
                if quote == '"' and text[end] == "\\" and end + 1 < n:
                    buf.append(text[end + 1])
                    end += 2
                    continue
                buf.append(text[end])
                end += 1
            if end >= n:
                return None
            parts.append("".join(buf))
            pos = end + 1
        else:
            match = _BARE.match(text, pos)
            if not match:
                return None
            parts.append(match.group())
            pos = match.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == ".":
            pos += 1
            continue
        return parts, pos


class KeyLines:
    """Where each dotted key of a TOML document is written (1-based lines)."""

    def __init__(self, text: str) -> None:
        self.keys: dict[tuple[str, ...], int] = {}
        self.tables: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        in_multiline: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_multiline is not None:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            stripped = line.lstrip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("["):
                double = stripped.startswith("[[")
                parsed = _parse_key(stripped, 2 if double else 1)
                if parsed is not None:
                    parts, end = parsed
                    closer = "]]" if double else "]"
                    if stripped.startswith(closer, end):
                        table = tuple(parts)
                        self.tables.setdefault(table, number)
                        self.keys.setdefault(table, number)
                continue
            parsed = _parse_key(stripped, 0)
            if parsed is None:
                continue
            parts, end = parsed
            if end >= len(stripped) or stripped[end] != "=":
                continue
            full = table + tuple(parts)
            for i in range(len(table) + 1, len(full) + 1):  # dotted keys define tables too
                self.keys.setdefault(full[:i], number)
            rest = stripped[end + 1 :]
            for delim in ('"""', "'''"):
                if rest.count(delim) % 2 == 1:
                    in_multiline = delim
                    break

    def line_of(self, field: str | tuple[str, ...]) -> int:
        parts = tuple(_split_field(field)) if isinstance(field, str) else field
        for i in range(len(parts), 0, -1):
            if parts[:i] in self.keys:
                return self.keys[parts[:i]]
        return 1


def _split_field(field: str) -> list[str]:
    parsed = _parse_key(field, 0)
    return parsed[0] if parsed else [field]


# --------------------------------------------------------------------------- validation


class _Checker:
    def __init__(self, lines: KeyLines) -> None:
        self.lines = lines
        self.issues: list[SchemaIssue] = []

    def fail(self, path: tuple[str, ...], message: str) -> None:
        self.issues.append(SchemaIssue(dotted(*path), self.lines.line_of(path), message))

    def table(self, data: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
        """A sub-table of ``data`` (empty when absent), with its unknown keys reported."""
        value = data.get(path[-1], {}) if path else data
        if not isinstance(value, dict):
            self.fail(path, "must be a table")
            return {}
        allowed = _TABLES.get(".".join(path))
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    self.fail((*path, key), "unknown key")
        return value

    def string(
        self, data: Mapping[str, Any], path: tuple[str, ...], *, required: bool = False
    ) -> str | None:
        key = path[-1]
        if key not in data:
            if required:
                self.fail(path, "missing (required)")
            return None
        value = data[key]
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {_kind(value)}")
            return None
        return value

    def choice(
        self, data: Mapping[str, Any], path: tuple[str, ...], choices: tuple[str, ...]
    ) -> str | None:
        value = self.string(data, path)
        if value is not None and value not in choices:
            self.fail(path, f"must be one of {', '.join(choices)}; got {value!r}")
            return None
        return value

    def integer(self, data: Mapping[str, Any], path: tuple[str, ...]) -> int | None:
        value = data.get(path[-1])
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, got {_kind(value)}")
            return None
        return value

    def preset(self, data: Mapping[str, Any], path: tuple[str, ...]) -> Preset | None:
        value = self.choice(data, path, PRESETS)
        return Preset(value) if value is not None else None


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    names: dict[type, str] = {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def _issued(check: _Checker, data: Mapping[str, Any]) -> datetime | None:
    path = ("issued",)
    if "issued" not in data:
        check.fail(path, "missing (required)")
        return None
    value = data["issued"]
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            check.fail(path, "must be an RFC 3339 time such as 2026-11-30T00:00:00Z")
            return None
    if not isinstance(value, datetime):
        check.fail(path, f"must be a date-time with a timezone, got {_kind(value)}")
        return None
    if value.tzinfo is None:
        check.fail(path, "must include a timezone (for example a trailing Z)")
        return None
    return value.astimezone(UTC)


def _caps_table(
    check: _Checker, caps: Mapping[str, Any], kind: str, valid_name: Callable[[str], bool]
) -> dict[str, Preset]:
    table = check.table(caps, ("caps", kind))
    out: dict[str, Preset] = {}
    noun = "user" if kind == "users" else "group"
    for name in table:
        path = ("caps", kind, name)
        if not valid_name(name):
            check.fail(path, f"not a valid {noun} name")
            continue
        preset = check.preset(table, path)
        if preset is not None:
            out[name] = preset
    return out


def _harnesses(check: _Checker, data: Mapping[str, Any]) -> frozenset[str] | None:
    table = check.table(data, ("harnesses",))
    if "allowed" not in table:
        return None
    path = ("harnesses", "allowed")
    value = table["allowed"]
    if not isinstance(value, list):
        check.fail(path, f"must be an array of harness names, got {_kind(value)}")
        return frozenset()
    allowed: set[str] = set()
    for item in value:
        if not isinstance(item, str) or item not in HARNESSES:
            check.fail(path, f"unknown harness {item!r}; known: {', '.join(HARNESSES)}")
        else:
            allowed.add(item)
    return frozenset(allowed)


def _audit(check: _Checker, data: Mapping[str, Any]) -> AuditExport:
    table = check.table(data, ("audit",))
    required = table.get("export_required", False)
    if not isinstance(required, bool):
        check.fail(("audit", "export_required"), "must be true or false")
        required = True  # fail closed for the rest of the checks
    endpoint = check.string(table, ("audit", "endpoint"))
    if endpoint is not None:
        problem = url_problem(endpoint)
        if problem is not None:
            check.fail(("audit", "endpoint"), problem)
            endpoint = None
    elif required:
        check.fail(("audit", "endpoint"), "missing (required when export_required = true)")
    protocol = check.choice(table, ("audit", "protocol"), OTLP_PROTOCOLS) or "grpc"
    credential = check.string(table, ("audit", "credential_file"))
    credential_path = None
    if credential is not None:
        credential_path = Path(credential)
        if not credential_path.is_absolute():
            check.fail(("audit", "credential_file"), "must be an absolute path")
            credential_path = None
    return AuditExport(
        required=bool(required),
        endpoint=endpoint,
        protocol=protocol,
        credential_file=credential_path,
        key_fingerprints=_key_fingerprints(check, table),
    )


def _key_fingerprints(check: _Checker, audit: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """``[audit.key_fingerprints]``: box name = a fingerprint or an array of them."""
    table = check.table(audit, ("audit", "key_fingerprints"))
    out: dict[str, frozenset[str]] = {}
    for box, value in table.items():
        path = ("audit", "key_fingerprints", box)
        if not box or not box.isprintable():
            check.fail(path, "not a valid box name")
            continue
        items = value if isinstance(value, list) else [value]
        if not items:
            check.fail(path, "must name at least one fingerprint")
            continue
        bad = [i for i in items if not isinstance(i, str) or not _FINGERPRINT.match(i)]
        if bad:
            check.fail(
                path,
                f"{bad[0]!r} is not an audit key fingerprint "
                "(sha256: and 64 lower-case hex digits, as `openbus audit key` prints it)",
            )
            continue
        out[box] = frozenset(items)
    return out


def _limits(check: _Checker, data: Mapping[str, Any]) -> Limits:
    table = check.table(data, ("limits",))
    values: dict[str, int] = {}
    for name, maximum in BUILTIN_MAXIMA.items():
        path = ("limits", name)
        value = check.integer(table, path)
        if value is None:
            continue
        if value > maximum:
            check.fail(
                path,
                f"{value} would loosen the built-in maximum of {maximum}; "
                "a policy may only tighten limits",
            )
        elif value < MINIMA[name]:
            check.fail(path, f"must be at least {MINIMA[name]}, got {value}")
        else:
            values[name] = value
    return Limits(**values)


def _hosted(check: _Checker, data: Mapping[str, Any]) -> HostedDefaults:
    table = check.table(data, ("hosted",))
    connect = check.preset(table, ("hosted", "connect_default")) or Preset.OFF
    control = check.choice(table, ("hosted", "control"), CONTROL_MODES) or "connected"
    return HostedDefaults(
        connect_default=connect, control="off" if control == "off" else "connected"
    )


def parse_policy(raw: bytes, path: str) -> Policy:
    """Parse and validate the exact bytes of a policy file; raise ``PolicyInvalid``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PolicyInvalid(path, [SchemaIssue("(file)", line, "not UTF-8 text")]) from None
    try:
        data = toml.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = int(found.group(1)) if found else 1
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc)) or "syntax error"
        raise PolicyInvalid(path, [SchemaIssue("(syntax)", line, message)]) from None
    lines = KeyLines(text)
    check = _Checker(lines)
    check.table(data, ())

    org = check.string(data, ("org",), required=True)
    if org is not None and not _ORG.match(org):
        check.fail(("org",), "must be letters, digits, '.', '_' or '-' (at most 128)")
    version = check.integer(data, ("version",))
    if "version" not in data:
        check.fail(("version",), "missing (required)")
    elif version is not None and version < 1:
        check.fail(("version",), f"must be at least 1, got {version}")
    issued = _issued(check, data)

    caps = check.table(data, ("caps",))
    default_cap = check.preset(caps, ("caps", "default")) or Preset.OFF
    user_caps = _caps_table(check, caps, "users", lambda n: bool(_ACCOUNT.match(n)))
    group_caps = _caps_table(check, caps, "groups", lambda n: bool(_ACCOUNT.match(n)))

    harnesses = _harnesses(check, data)
    audit = _audit(check, data)
    limits = _limits(check, data)
    hosted = _hosted(check, data)

    if check.issues:
        issues = sorted(check.issues, key=lambda i: (i.line, i.field))
        raise PolicyInvalid(path, issues)
    assert org is not None and version is not None and issued is not None
    return Policy(
        org=org,
        version=version,
        issued=issued,
        default_cap=default_cap,
        user_caps=user_caps,
        group_caps=group_caps,
        harnesses=harnesses,
        audit=audit,
        limits=limits,
        hosted=hosted,
        lines=dict(lines.keys),
    )
