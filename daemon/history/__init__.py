"""The history index of past agent sessions (seed 000's agent-history, in Python).

Theory of operation
-------------------
Harnesses write transcripts; the index keeps about one percent of them: one entry per
session with its identity and the human's prompts, enough to *route* (find the session
behind a topic, a branch or a PR, then resume it or address its live pane), never enough to
*remember* (what the agent concluded still needs the transcript).

* ``parse``: pure functions from transcript lines to a ``ParsedSession``.
  Claude Code (``<config>/projects/<cwd, / replaced by ->/<session id>.jsonl``, subagents in
  ``<session id>/subagents/agent-<id>.jsonl`` or, older, ``agent-<id>.jsonl``) and Codex
  (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` plus ``session_index.jsonl`` for thread
  names) and omp (``<agent dir>/sessions/<cwd, / replaced by ->/<time>_<session id>.jsonl``,
  the agent dir ``$PI_CODING_AGENT_DIR`` or ``~/.omp/agent``) and Gemini CLI
  (``<home>/.gemini/tmp/<project>/chats/session-*.jsonl``, the home ``$GEMINI_CLI_HOME`` or
  ``~``, and a Gemini launcher's ``HOME``) and OpenCode (every session in one SQLite database,
  ``<data dir>/opencode.db``, read read-only by ``opencode``; the data dir
  ``$XDG_DATA_HOME/opencode`` or ``~/.local/share/opencode``).
* ``repo``: the git toplevel and origin of a cwd, read from the ``.git`` files directly.
* ``sources``: where the harnesses keep transcripts, and finding one by session id.
* ``query``: the pure search language: words, stopwords, quoted FTS5 terms, repo keys.
* ``store``: the SQLite database ``history.db`` (WAL) under the state dir, FTS5 with bm25,
  ranked search with the repo filter inside the SQL.
* ``reconcile``: incremental reconcile keyed on (size, mtime_ns, inode), ``push`` for Claude
  Code hooks; ``files`` reads one transcript file into its session; ``parallel`` has a helper
  process (``parse_helper``) read the files of a large pass on a second core while the
  reconcile writes.
* ``expunge``: an entry, its transcript file(s) and its lines in the harness's own files
  (OpenCode's database is never written: its entries only).
* ``index``: ``HistoryIndex``, the one object over all of these (search, get, expunge, ...).
* ``liveness``: running / not_running / running_unknown, and the pane when known.
* ``project``: the allowlisted projection agents see (seed 000, "History is index fields only").
* ``service``: the gate actions ``history.search``, ``history.get``, ``history.expunge``.
"""
