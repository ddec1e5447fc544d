"""What every verb of the ``openbus`` CLI shares: the common flags, printing, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from openbus.daemon.config import Config

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
