"""The ``openbus`` command line: the human side at the desk and in scripts.

Every verb takes ``--config FILE`` and, where it prints data, ``--json``. Errors print one
line naming what went wrong and exit non-zero; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from openbus.daemon.config import Config, load_config
from openbus.daemon.core.errors import ConfigError, OpenbusError

Handler = Callable[[argparse.Namespace, Config], int]

EXIT_ERROR = 1
EXIT_USAGE = 2


def emit(args: argparse.Namespace, data: Any, text: Callable[[Any], str]) -> None:
    if getattr(args, "json", False):
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        out = text(data)
        if out:
            print(out)


def add_common(parser: argparse.ArgumentParser, *, json_output: bool = True) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="config file (else $OPENBUS_CONFIG, else the default)"
    )
    if json_output:
        parser.add_argument("--json", action="store_true", help="print JSON")


def _serve(args: argparse.Namespace, config: Config) -> int:
    from openbus.daemon.serve import serve

    serve(config)
    return 0  # not reached: serve replaces the process


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="openbus", description="The daemon beside your tmux fleet of coding agents."
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    p = sub.add_parser("serve", help="run the daemon (gunicorn, one worker)")
    add_common(p, json_output=False)
    p.set_defaults(handler=_serve)
    from openbus.daemon import cli_verbs

    cli_verbs.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(getattr(args, "config", None))
        handler: Handler = args.handler
        return handler(args, config)
    except ConfigError as exc:
        print(f"openbus: config error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except OpenbusError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"openbus: {exc.message}{where}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
