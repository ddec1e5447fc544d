"""Masking secrets in what agents read: each kind is masked, and the quick pre-tests that skip
detectors on lines they cannot match change no answer."""

from __future__ import annotations

import importlib
import random
import re
import sys
from typing import Any

import pytest

from openbus.daemon.history.project import AgentView
from openbus.daemon.mcp import masking
from openbus.daemon.mcp.masking import Masker, needles_of, requirements_of
from openbus.daemon.mcp.observe import _find_project
from tests.support.masking import every_detector

SECRETS = {
    "AWS Access Key": "deploy with AKIAIOSFODNN7EXAMPLE today",
    "GitHub Token": "token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 here",
    "Slack Token": "slack xoxb-123456789012-123456789012-AbCdEfGhIjKlMnOpQrStUvWx",
    "Private Key": "-----BEGIN RSA PRIVATE KEY-----",
    "JSON Web Token": (
        "Authorization: eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ),
    "Basic Auth Credentials": "git clone https://alice:s3cr3tpassw0rd@example.com/repo.git",
    "Secret Keyword": 'db_password = "correct-horse-battery"',
    "openbus token": "OPENBUS_TOKEN=obk_Zm9vYmFyYmF6cXV4cXV1eHh5enp5",
}

BENIGN = [
    "Fix the flaky login test in the auth module",
    "/home/dev/src/widget",
    "feature/login-timeout",
    "https://github.com/acme/widget/pull/42",
    "❯ npm test -- --watch",
    "The password field must not be empty",  # a keyword, no secret
    'set api_key: "later" then `token` => rotate; secret == "x"',  # keywords and quotes
    "password: hunter2hunter2 (not quoted)",
    "aws docs say the key rotates yearly",
    "",
]


@pytest.fixture(scope="module")
def masker() -> Masker:
    return Masker()


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_of_secret_is_masked_and_named(masker: Masker, kind: str) -> None:
    line = SECRETS[kind]
    masked = masker.mask(line)
    assert "[masked " in masked.text
    assert masked.kinds
    if kind == "openbus token":
        assert "obk_" not in masked.text and kind in masked.kinds


def test_plain_text_comes_back_unchanged(masker: Masker) -> None:
    for line in BENIGN[:5]:
        assert masker.mask(line).text == line


def test_the_quick_pre_tests_change_no_answer(masker: Masker) -> None:
    plain = every_detector()
    assert len(masker._always) < len(plain._always)  # the pre-tests are in use here
    rng = random.Random(7)
    words = " ".join([*SECRETS.values(), *BENIGN]).split()
    lines = [*SECRETS.values(), *BENIGN]
    lines += [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(300)]
    lines.append("\n".join(SECRETS.values()))
    lines += [line.upper() for line in lines[:40]] + ["naïve " + line for line in lines[:40]]
    # the letters past ASCII that case-insensitive matching takes for ASCII ones
    kin = str.maketrans({"i": "ı", "I": "İ", "k": "\u212a", "s": "ſ"})
    lines += ["│ " + line.translate(kin) for line in [*SECRETS.values(), *BENIGN]]
    for line in lines:
        assert masker.mask(line) == plain.mask(line), line


def test_found_sessions_are_masked_in_their_text_but_keep_their_ids() -> None:
    session_id = "0f3c9a8e-6f1d-4e0b-9b7a-2a4c5d6e7f80"
    result = {
        "results": [
            {
                "harness": "claude",
                "session_id": session_id,
                "repo": "github.com/acme/widget",
                "title": "use ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 for the release",
                "cwd": "/home/dev/src/widget",
                "branches": ["main"],
                "prs": [],
                "last_active": "2026-11-30T06:00:00Z",
                "matched_terms": ["release"],
                "liveness": {"state": "not_running", "pane": None},
                "prompts": ["never shown"],
            }
        ]
    }
    projected = _find_project(result, None)  # type: ignore[arg-type]
    (session,) = projected["sessions"]
    assert session["session_id"] == session_id
    assert "ghp_" not in session["title"] and "[masked GitHub Token]" in session["title"]
    assert projected["masked"] == ["GitHub Token"]
    assert "prompts" not in session


def _view(title: str, clean_under: int | None) -> AgentView:
    view = AgentView(
        harness="claude",
        session_id="0f3c9a8e",
        repo="github.com/acme/widget",
        title=title,
        cwd="/home/dev/src/widget",
        branches=["main"],
        prs=[],
        last_active="2026-11-30T06:00:00Z",
        matched_terms=["release"],
        liveness={"state": "not_running", "pane": None},
    )
    view.clean_under = clean_under
    return view


def test_a_session_the_index_kept_clean_under_the_rules_in_force_is_not_masked_again() -> None:
    # what the index wrote down is taken as it is: here a title it could never have kept clean
    # shows that the projection does not mask it again; under other rules, or none, it does
    title = "use ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 for the release"
    fingerprint = masking.masker().fingerprint
    assert fingerprint is not None
    trusted = _find_project({"results": [_view(title, fingerprint)]}, None)  # type: ignore[arg-type]
    assert trusted["sessions"][0]["title"] == title and "masked" not in trusted
    for other in (fingerprint ^ 1, None):
        projected = _find_project({"results": [_view(title, other)]}, None)  # type: ignore[arg-type]
        assert "ghp_" not in projected["sessions"][0]["title"]
        assert projected["masked"] == ["GitHub Token"]


def test_the_fingerprint_names_every_rule_masking_follows(masker: Masker) -> None:
    plugins = list(masker._plugins)
    assert masking._fingerprint(plugins) == masker.fingerprint == Masker().fingerprint
    assert masking._fingerprint(plugins[:-1]) != masker.fingerprint  # a detector fewer
    entropy = next(p for p in plugins if type(p).__name__ == "HexHighEntropyString")
    limit = entropy.entropy_limit
    try:
        entropy.entropy_limit = limit + 0.5  # a setting changed
        assert masking._fingerprint(plugins) != masker.fingerprint
    finally:
        entropy.entropy_limit = limit
    assert masker.clean(["tidy the release script", "/home/dev/src/widget"])
    assert not masker.clean(["tidy", SECRETS["GitHub Token"]])


def test_a_regex_names_the_literals_every_match_must_hold() -> None:
    assert needles_of(re.compile(r'(?:\s|=|:|"|^)AKC[a-zA-Z0-9]{10,}')) == {"akc"}
    assert needles_of(re.compile(r"(?:cloudant|token)-\w+")) == {"cloudant", "token"}
    assert needles_of(re.compile(r"([\'\"])([A-Za-z]+)(\1)")) == {"'", '"'}
    assert needles_of(re.compile(r"(?:api|)key", re.IGNORECASE)) == {"key"}
    assert needles_of(re.compile(r"\d{8,10}[a-z]*")) is None  # nothing literal to require


def test_a_regex_names_every_piece_a_match_must_hold() -> None:
    assert requirements_of(re.compile(r"(?:api_)?key\s*=\s*([\'\"])\w+\1")) == [
        {"key"},
        {"="},
        {"'", '"'},
    ]


def test_the_keyword_detector_runs_only_on_a_line_with_a_keyword_and_a_quote(
    masker: Masker,
) -> None:
    def runs(line: str) -> bool:
        return "Secret Keyword" in {kind for _, kind, _ in masker._active(line)}

    assert not runs("Rotate the webhook signing keys")  # a keyword, no quote
    assert not runs('Say "hello" to the new intern')  # a quote, no keyword
    assert runs('Rotate the "signing" keys')
    assert "horse" not in masker.mask('db_password = "correct-horse-battery"').text


def test_the_letters_read_as_ascii_are_all_that_re_matches_with_an_ascii_one() -> None:
    lower: Any = importlib.import_module("_sre").unicode_tolower
    extra: Any = importlib.import_module("re._casefix")._EXTRA_CASES
    kin = {c: chr(lower(c)) for c in range(128, sys.maxunicode + 1) if lower(c) < 128}
    for a, others in extra.items():
        for c in others:
            if a < 128 <= c:
                kin[c] = chr(a)
    assert kin == masking.ASCII_KIN
    for c, a in kin.items():  # and re agrees
        assert re.fullmatch(re.escape(a), chr(c), re.IGNORECASE)


def test_a_screen_line_skips_the_detectors_it_cannot_match(masker: Masker) -> None:
    line = "╭─ ❯ rotate the signing keys ─╮"
    assert len(masker._active(line)) < len(masker._detectors)
    assert masker._active(line.replace("k", "\u212a")) == masker._active(line)


def test_lines_holding_the_same_needles_reuse_one_choice_of_detectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(masking, "CHOSEN_KEPT", 3)  # forget often: each answer stays the same
    masker = Masker()
    once = {line: masker.mask(line) for line in [*SECRETS.values(), *BENIGN]}
    assert 0 < len(masker._chosen) <= 3
    for line, first in [*once.items(), *reversed(once.items())]:
        assert masker.mask(line) == first, line
    key = SECRETS["AWS Access Key"]
    benign = key.replace("AKIAIOSFODNN7EXAMPLE", "AKIAnope")  # the same needles, no key
    assert masker._active(benign) is masker._active(key)
    assert masker.mask(benign).text == benign
