"""The openbus daemon: core rules, tmux watcher, history index, MCP and HTTP API, audit."""
