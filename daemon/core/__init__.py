"""Core rules with no I/O: scopes, grants, consent, admission, audit records.

Everything here is plain classes and functions over values. Time and randomness come in as
arguments, so expiry and replay windows are tested exactly. Adapters (tmux, SQLite, OTLP,
falcon, MCP, PAM) wrap this package and translate its one error hierarchy at their edges.
"""
