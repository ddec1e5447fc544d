"""Threads: a request's moves follow one table; entries carry their origin link."""

from __future__ import annotations

import pytest

from openbus.daemon.core.threads import (
    MOVES,
    Entry,
    EntryKind,
    RequestEvent,
    RequestState,
    check_request,
    move,
    origin_line,
    parse_entry_id,
)
from openbus.kernel.errors import BadRequest, InvalidTransition


def test_a_request_goes_direct_or_to_control_and_falls_back_to_control() -> None:
    assert move(RequestState.RECEIVED, RequestEvent.DIRECT) is RequestState.DIRECT
    assert move(RequestState.RECEIVED, RequestEvent.DELEGATE) is RequestState.DELEGATED
    assert move(RequestState.DIRECT, RequestEvent.FALLBACK) is RequestState.DELEGATED


def test_control_hands_off_and_answers_as_often_as_it_needs() -> None:
    state = move(RequestState.DELEGATED, RequestEvent.HAND_OFF)
    state = move(state, RequestEvent.REPLY)
    state = move(state, RequestEvent.REPLY)
    assert move(state, RequestEvent.HAND_OFF) is RequestState.HANDED_OFF


@pytest.mark.parametrize(
    ("state", "event"),
    [(s, e) for s in RequestState for e in RequestEvent if (s, e) not in MOVES],
)
def test_every_move_outside_the_table_is_invalid(state: RequestState, event: RequestEvent) -> None:
    with pytest.raises(InvalidTransition):
        move(state, event)


def test_an_entry_names_its_request_and_is_plain_data() -> None:
    request = Entry(
        3, "human:alice", EntryKind.REQUEST, 1.0, "human:alice", "hi", state=RequestState.RECEIVED
    )
    typed = Entry(
        4,
        "human:alice",
        EntryKind.INPUT,
        2.0,
        "control",
        "brief",
        origin=request.id,
        pane="%2",
        incarnation="inc_2",
    )
    assert request.id == "r3"
    assert typed.to_dict()["origin"] == "r3"
    assert request.to_dict()["state"] == "received"
    assert origin_line(request) == "origin r3 (a request from human:alice)"


def test_ids_and_texts_are_checked() -> None:
    assert parse_entry_id("r12") == 12
    for bad in ("12", "rx", None, "r"):
        with pytest.raises(BadRequest):
            parse_entry_id(bad)
    assert check_request("  fix it  ") == "fix it"
    for bad in ("", "   ", 5, "a\x1bb"):
        with pytest.raises(BadRequest):
            check_request(bad)
