"""Starting an installed unit's ``ExecStart`` as systemd would, where systemd cannot boot.

Reads a unit file's ``[Service]`` (and a ``.socket``'s ``ListenStream``) and runs its command
as the unit's user with its groups (the user's own plus ``SupplementaryGroups``), its
``Environment``, its ``WorkingDirectory`` and, for a socket-activated service, the listening
socket as fd 3 with ``LISTEN_FDS``/``LISTEN_PID``. Only what our units use is understood.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SD_LISTEN_FDS_START = 3


@dataclass
class Unit:
    path: Path
    sections: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Unit:
        unit = cls(path)
        section: dict[str, list[str]] = {}
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                section = unit.sections.setdefault(line.strip("[]"), {})
                continue
            key, _, value = line.partition("=")
            section.setdefault(key.strip(), []).append(value.strip())
        return unit

    def get(self, key: str, section: str = "Service") -> str | None:
        values = self.sections.get(section, {}).get(key)
        return values[-1] if values else None

    def argv(self, key: str) -> list[str]:
        command = self.get(key)
        assert command is not None, f"{self.path.name} has no {key}"
        return [word.replace("$$", "$") for word in shlex.split(command)]

    def environment(self) -> dict[str, str]:
        user = self.get("User") or "root"
        entry = pwd.getpwnam(user)
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "USER": user,
            "LOGNAME": user,
            "HOME": entry.pw_dir,
            "SHELL": entry.pw_shell,
        }
        for assignment in self.sections.get("Service", {}).get("Environment", []):
            for word in shlex.split(assignment):
                key, _, value = word.partition("=")
                env[key] = value
        return env

    def credentials(self) -> dict[str, Any]:
        user = self.get("User")
        if user is None:
            return {}
        entry = pwd.getpwnam(user)
        groups = os.getgrouplist(user, entry.pw_gid)
        for name in (self.get("SupplementaryGroups") or "").split():
            groups.append(grp.getgrnam(name).gr_gid)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": groups}

    def cwd(self) -> str:
        place = self.get("WorkingDirectory")
        if place == "~":
            return self.environment()["HOME"]
        return place or "/"

    def start(
        self, key: str = "ExecStart", *, log: IO[bytes], listening: socket.socket | None = None
    ) -> subprocess.Popen[bytes]:
        argv = self.argv(key)
        env = self.environment()
        fd = -1
        if listening is not None:
            # the socket as fd 3 and LISTEN_PID the service's own pid (the shell execs in place)
            fd = listening.fileno()
            assert fd != SD_LISTEN_FDS_START
            env["LISTEN_FDS"] = "1"
            argv = ["/bin/sh", "-c", 'export LISTEN_PID=$$; exec "$@"', "sh", *argv]

        def socket_as_fd_3() -> None:
            os.dup2(fd, SD_LISTEN_FDS_START)  # inheritable; every other fd is close-on-exec

        return subprocess.Popen(
            argv,
            env=env,
            cwd=self.cwd(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=listening is None,
            preexec_fn=socket_as_fd_3 if listening is not None else None,  # noqa: PLW1509
            umask=int(self.get("UMask") or "0022", 8),
            **self.credentials(),
        )


def listen_stream(unit: Unit) -> socket.socket:
    """The socket a ``.socket`` unit's ``ListenStream`` (a port, all addresses) describes."""
    port = int(unit.get("ListenStream", "Socket") or "0")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.listen(128)
    return sock
