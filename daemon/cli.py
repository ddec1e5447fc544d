"""The ``openbus`` command line: the human side at the desk and in scripts.

Every verb takes ``--config FILE`` and, where it prints data, ``--json``. Errors print one
line naming what went wrong and exit non-zero; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from openbus.daemon import (
    cli_ask,
    cli_audit,
    cli_consent,
    cli_directory,
    cli_history,
    cli_launch,
    cli_messages,
    cli_sessions,
    cli_ui,
)
from openbus.daemon.cli_common import EXIT_ERROR, EXIT_USAGE, Handler, add_common
from openbus.daemon.config import Config, load_config
from openbus.kernel.errors import ConfigError, OpenbusError

VERBS = (
    cli_consent,
    cli_history,
    cli_audit,
    cli_directory,
    cli_launch,
    cli_messages,
    cli_sessions,
    cli_ask,
    cli_ui,
)


def _serve(args: argparse.Namespace, config: Config) -> int:
    # The preflight builds the app (seconds of imports); no other verb should pay for it.
    from openbus.daemon.serve import serve  # noqa: PLC0415 - start-up cost of every verb

    serve(config)
    return 0  # not reached: serve replaces the process


def _version() -> str:
    try:
        return version("openbus")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="openbus", description="The daemon beside your tmux fleet of coding agents."
    )
    parser.add_argument("--version", action="version", version=f"openbus {_version()}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    p = sub.add_parser("serve", help="run the daemon (gunicorn, one worker)")
    add_common(p, json_output=False)
    p.set_defaults(handler=_serve)
    for verb in VERBS:
        verb.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(getattr(args, "config", None))
        handler: Handler = args.handler
        return handler(args, config)
    except ConfigError as exc:
        _report(args, exc, f"config error: {exc.message}")
        return EXIT_USAGE
    except OpenbusError as exc:
        where = f" ({exc.field})" if exc.field else ""
        _report(args, exc, exc.message + where)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _report(args: argparse.Namespace, exc: OpenbusError, line: str) -> None:
    """An error as one line on stderr; under ``--json`` as the API's one error shape on
    stdout (where a script reads the answer), so the output is JSON either way."""
    if getattr(args, "json", False):
        json.dump(exc.to_dict(), sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(f"openbus: {line}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
