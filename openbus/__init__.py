"""openbus: the daemon beside a fleet of coding agents in tmux.

The repository keeps its parts in top-level folders (``daemon/``, ``tunnel/``, ``policy/``);
this package maps them under one ``openbus`` namespace, so the installed import names never
shadow other distributions (python-daemon installs ``daemon``).
"""

__version__ = "0.1.0"
