"""The tmux side of the daemon: the adapter's primitives, control mode and the watcher."""

from openbus.daemon.tmux.adapter import PaneInfo, Tmux, default_socket
from openbus.daemon.tmux.control import ControlClient, ControlParser, TmuxCommandError

__all__ = [
    "ControlClient",
    "ControlParser",
    "PaneInfo",
    "Tmux",
    "TmuxCommandError",
    "default_socket",
]
