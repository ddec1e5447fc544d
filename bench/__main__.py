"""``make bench``: run every ``bench/bench_*.py`` (or those named on the command line)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    if argv:
        names = [n for n in names if any(a in n for a in argv)]
    failed = 0
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        started = time.monotonic()
        try:
            module = importlib.import_module(f"bench.{name}")
            module.main()
        except Exception:
            failed += 1
            traceback.print_exc()
        print(f"--- {name}: {time.monotonic() - started:.1f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
