"""The search language: words, stopwords, quoted FTS5 terms."""

from __future__ import annotations

from openbus.daemon.history.query import fts_query, query_terms


def test_query_terms_are_words_quoted_with_stopwords_dropped() -> None:
    assert query_terms("What is the Login flow? login") == ["login", "flow"]
    assert query_terms("the") == ["the"]
    assert fts_query(["login", "flow"]) == '"login" OR "flow"'
