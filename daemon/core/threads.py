"""Threads and origin links: every front-end request and each input it causes, tied together.

Theory of operation
-------------------
A *thread* belongs to a requester (``human:alice``): each request a front end takes from
them (``openbus ask``, the page's request box) is a ``request`` entry in it. Everything the
request causes is another entry in the same thread whose ``origin`` is the request's id:

* ``route``: the dispatcher's decision and reason (direct to one pane, or to control);
* ``input``: something typed into a pane because of it (a message, a brief, a key), with the
  pane and incarnation, so "why did this agent get that?" is answered from the pane's side;
* ``reply``: control's answer or clarifying question;
* ``note``: what the daemon did about it on its own (a fallback, a re-seed of control).

A request moves through a small state machine (``MOVES``); any other move is an
``InvalidTransition`` (a bug in the caller)::

    received --direct----> direct        (sent straight to one pane)
    received --delegate--> delegated     (control's to work out)
    direct   --fallback--> delegated     (the pane was recycled or changed before the send)
    delegated/handed_off/answered --hand_off--> handed_off
    direct/delegated/handed_off/answered --reply--> answered

Entries are values; the adapter (``daemon.control.threads``) stores them in the state
database with the audit record of the call that made them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from openbus.kernel.errors import BadRequest, along

MAX_REQUEST_CHARS = 8000


class EntryKind(enum.StrEnum):
    REQUEST = "request"
    ROUTE = "route"
    INPUT = "input"
    REPLY = "reply"
    NOTE = "note"


class RequestState(enum.StrEnum):
    RECEIVED = "received"
    DIRECT = "direct"
    DELEGATED = "delegated"
    HANDED_OFF = "handed_off"
    ANSWERED = "answered"


class RequestEvent(enum.StrEnum):
    DIRECT = "direct"
    DELEGATE = "delegate"
    FALLBACK = "fallback"
    HAND_OFF = "hand_off"
    REPLY = "reply"


_S, _E = RequestState, RequestEvent
MOVES: dict[tuple[RequestState, RequestEvent], RequestState] = {
    (_S.RECEIVED, _E.DIRECT): _S.DIRECT,
    (_S.RECEIVED, _E.DELEGATE): _S.DELEGATED,
    (_S.DIRECT, _E.FALLBACK): _S.DELEGATED,
    (_S.DELEGATED, _E.HAND_OFF): _S.HANDED_OFF,
    (_S.HANDED_OFF, _E.HAND_OFF): _S.HANDED_OFF,
    (_S.ANSWERED, _E.HAND_OFF): _S.HANDED_OFF,
    (_S.DIRECT, _E.REPLY): _S.ANSWERED,
    (_S.DELEGATED, _E.REPLY): _S.ANSWERED,
    (_S.HANDED_OFF, _E.REPLY): _S.ANSWERED,
    (_S.ANSWERED, _E.REPLY): _S.ANSWERED,
}


def move(state: RequestState, event: RequestEvent) -> RequestState:
    """The state ``event`` takes a request in ``state`` to; else ``InvalidTransition``."""
    return along(MOVES, state, event, "a request")


def may(state: RequestState, event: RequestEvent) -> bool:
    return (state, event) in MOVES


@dataclass(frozen=True)
class Entry:
    seq: int
    thread: str  # the requester's actor name
    kind: EntryKind
    time: float
    actor: str  # who made this entry: the requester, the dispatcher, control, the daemon
    text: str
    origin: str | None = None  # the request this entry stems from
    pane: str | None = None
    incarnation: str | None = None
    state: RequestState | None = None  # requests only
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return entry_id(self.seq)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "thread": self.thread,
            "kind": self.kind.value,
            "time": self.time,
            "actor": self.actor,
            "text": self.text,
            "origin": self.origin,
            "pane": self.pane,
            "incarnation": self.incarnation,
        }
        if self.state is not None:
            body["state"] = self.state.value
        if self.details:
            body["details"] = dict(self.details)
        return body


def entry_id(seq: int) -> str:
    return f"r{seq}"


def parse_entry_id(value: object, field_name: str = "thread") -> int:
    """The sequence number of an entry id like ``r12``; ``BadRequest`` naming the field."""
    if isinstance(value, str) and value.startswith("r") and value[1:].isdigit():
        return int(value[1:])
    raise BadRequest(f"{field_name} must be a request id like r12", field=field_name)


def check_request(text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("a request needs some text", field="text")
    if len(text) > MAX_REQUEST_CHARS:
        raise BadRequest(f"a request is at most {MAX_REQUEST_CHARS} characters", field="text")
    if not text.replace("\n", " ").isprintable():
        raise BadRequest("a request is printable text and newlines only", field="text")
    return text.strip()


def origin_line(request: Entry) -> str:
    """How an input names the request that caused it, typed into the pane."""
    return f"origin {request.id} (a request from {request.thread})"
