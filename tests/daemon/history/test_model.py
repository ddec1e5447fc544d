"""The history index's values: how a time is written for readers."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from openbus.daemon.history.model import iso


def test_a_time_is_written_in_utc_to_the_millisecond_as_isoformat_writes_it() -> None:
    rng = random.Random(5)
    times = [rng.uniform(0, 4e9) for _ in range(20_000)]
    times += [0.0, 0.0005, 0.9995, 1.9999996, 1e9 + 0.0005, 1764000000.123456, 253402300799.999]
    for ts in times:
        expected = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
        assert iso(ts) == expected.replace("+00:00", "Z"), ts
    assert iso(None) is None
