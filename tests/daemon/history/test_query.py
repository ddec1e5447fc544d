"""The search language: words, stopwords, quoted FTS5 terms."""

from __future__ import annotations

import sqlite3

from openbus.daemon.history.model import SessionEntry
from openbus.daemon.history.query import fts_query, matched_terms, query_terms, tokens
from openbus.daemon.history.store import create_shard, shard_table


def test_query_terms_are_words_quoted_with_stopwords_dropped() -> None:
    assert query_terms("What is the Login flow? login") == ["login", "flow"]
    assert query_terms("the") == ["the"]
    assert fts_query(["login", "flow"]) == '"login" OR "flow"'


def test_a_matched_term_is_a_whole_word_of_the_entry_as_the_index_cuts_it() -> None:
    entry = SessionEntry(
        harness="claude",
        session_id="c-1",
        repo="github.com/acme/widget",
        repo_root=None,
        origin=None,
        cwd="/w",
        branches=("fix/login_flow",),
        prs=(),
        title="Café crash",
        prompts=("Logging in fails",),
        started=None,
        last_active=None,
        resume_argv=None,
        subagent=False,
    )
    terms = ["log", "login", "flow", "cafe", "crash", "widget", "fails", "in"]
    # "log" is only inside "logging"; "login" and "flow" are cut apart at the underscore;
    # the accent is folded away as the tokenizer does
    assert matched_terms(entry, terms) == (
        "login",
        "flow",
        "cafe",
        "crash",
        "widget",
        "fails",
        "in",
    )


WORDS_OF_MANY_SCRIPTS = (
    "Straße Größe œuvre naïve Ça İstanbul ışık Ελληνικά ΣΊΣΥΦΟΣ ΌΡΟΣ Привет łódź Đặng Việt"
    " Ørsted Ｆｕｌｌwidth ﬁligree 日本語 ｶﾀｶﾅ x² 5µs ſ ǅemal Ⅻ ĳssel Ångström café_crash"
)


def test_a_text_is_cut_and_folded_into_the_words_the_index_tokenizer_makes_of_it() -> None:
    db = sqlite3.connect(":memory:")
    create_shard(db, 0)  # the store's own full-text table, and so its tokenizer
    table = shard_table(0)
    db.execute(f"INSERT INTO {table} (rowid, title) VALUES (1, ?)", (WORDS_OF_MANY_SCRIPTS,))
    db.execute(f"CREATE VIRTUAL TABLE words USING fts5vocab({table}, 'instance')")
    indexed = [t for (t,) in db.execute("SELECT term FROM words ORDER BY offset")]
    assert tokens(WORDS_OF_MANY_SCRIPTS) == indexed
