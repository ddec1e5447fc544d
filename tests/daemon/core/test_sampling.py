"""Anonymous refusals are sampled: the first of a window are recorded, the rest counted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from openbus.daemon.core.sampling import RefusalSampler


def test_a_key_that_used_its_burst_waits_until_its_window_closes() -> None:
    sampler = RefusalSampler(burst=2, window=60)
    sampler.admit("agent", 10.0)
    assert sampler.retry_after("agent", 10.0) is None
    sampler.admit("agent", 10.0)
    assert sampler.retry_after("agent", 40.0) == 30.0
    assert sampler.retry_after("other", 40.0) is None
    assert sampler.retry_after("agent", 70.0) is None


def test_the_first_refusals_of_a_window_get_their_own_records() -> None:
    sampler = RefusalSampler(burst=3, window=60)
    assert [sampler.admit("tcp", 0.0)[0] for _ in range(5)] == [True, True, True, False, False]


def test_a_closed_window_reports_what_it_suppressed_once() -> None:
    sampler = RefusalSampler(burst=1, window=60)
    for _ in range(4):
        sampler.admit("tcp", 1.0)
    assert sampler.sweep(60.9) == []
    [summary] = sampler.sweep(61.0)
    assert (summary.key, summary.count, summary.since) == ("tcp", 3, 1.0)
    assert sampler.sweep(500.0) == []
    assert sampler.admit("tcp", 500.0) == (True, [])


def test_keys_are_sampled_apart_and_bounded_in_number() -> None:
    sampler = RefusalSampler(burst=1, window=60, max_keys=2)
    assert sampler.admit("a", 0.0)[0] and sampler.admit("b", 1.0)[0]
    sampler.admit("a", 2.0)  # suppressed
    admitted, due = sampler.admit("c", 3.0)  # evicts the oldest window, "a", with its count
    assert admitted and [(d.key, d.count) for d in due] == [("a", 1)]


@given(st.lists(st.tuples(st.sampled_from("xyz"), st.floats(0, 5)), max_size=300))
def test_every_refusal_is_either_recorded_or_counted(events: list[tuple[str, float]]) -> None:
    sampler = RefusalSampler(burst=2, window=1.0, max_keys=2)
    recorded = counted = 0
    now = 0.0
    for key, step in events:
        now += step
        admitted, due = sampler.admit(key, now)
        recorded += admitted
        counted += sum(d.count for d in due)
    counted += sum(d.count for d in sampler.sweep(now + 10))
    assert recorded + counted == len(events)
