"""Peer messages through the real gate, cards, directory and tmux, into fake agent panes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from openbus.kernel.errors import (
    BadRequest,
    Conflict,
    NotConnected,
    NotFound,
    RateLimited,
    Refused,
)
from openbus.kernel.scopes import Preset
from tests.daemon.messaging.conftest import Agent, Scenario, World

Run = Callable[[Scenario], None]


async def approved_pair(w: World, a: Agent, b: Agent, mid: str = "hello-1") -> None:
    """A sends B a first message and the human approves the pair."""
    answer = await w.send(a, b, "first contact", mid)
    assert answer["outcome"] == "queued"
    cards = await w.until(lambda: w.messaging.book.get(a.principal or "", mid).card_id, "a card")
    await w.decide(cards, "approve_pair")
    assert await w.final(a, mid) == "delivered"


def test_a_first_message_needs_a_card_then_lands_once_with_provenance(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        answer = await w.send(a, b, "please rebase onto main\nand rerun the tests", "m-1")
        assert answer["outcome"] == "queued" and not answer["final"]
        assert "consent" in answer["waiting_for"]
        cards = await w.cards()
        assert [c["kind"] for c in cards] == ["message"]
        assert "please rebase" in cards[0]["summary"]
        assert b.received() == []
        await w.decide(cards[0]["id"], "approve")
        assert await w.final(a, "m-1") == "delivered"
        [prompt] = b.received()
        first, *rest = prompt.split("\n")
        assert first.startswith(f"[openbus message from {a.actor}")
        assert "id m-1" in first and f"(pane {a.pane})" in first and "2 lines follow" in first
        assert rest == ["\u2502 please rebase onto main", "\u2502 and rerun the tests"]
        screen = w.server.capture(b.pane)
        assert "[openbus message from" in screen and "please rebase onto main" in screen
        records = w.audit("m-1")
        assert [(r["action"], r["outcome"]) for r in records] == [
            ("message.send", "queued"),
            ("message.send", "delivered"),
        ]
        assert all(r["actor"] == a.actor.name for r in records if a.actor)

    run_world(scenario)


def test_an_approved_pair_needs_no_further_card(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        answer = await w.send(a, b, "second", "m-2")
        assert "waiting_for" not in answer or "consent" not in answer["waiting_for"]
        assert await w.final(a, "m-2") == "delivered"
        assert await w.cards() == []
        assert [p.split("\n")[-1] for p in b.received()] == [
            "\u2502 first contact",
            "\u2502 second",
        ]

    run_world(scenario)


def test_a_declined_card_is_final_and_nothing_is_typed(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await w.send(a, b, "hi", "m-1")
        [card] = await w.cards()
        await w.decide(card["id"], "decline")
        assert await w.final(a, "m-1") == "declined"
        assert b.received() == []
        assert [r["outcome"] for r in w.audit("m-1")] == ["queued", "declined"]

    run_world(scenario)


def test_a_busy_recipient_gets_the_message_at_its_next_idle(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        await w.hold(b)
        await w.send(a, b, "while you were busy", "m-2")
        assert (await w.status(a, "m-2", wait=1))["outcome"] == "queued"
        assert len(b.received()) == 2  # the first message and the human's HOLD prompt
        b.release()
        assert await w.final(a, "m-2") == "delivered"
        assert b.received()[-1].endswith("while you were busy")

    run_world(scenario)


def test_a_draft_in_the_composer_keeps_the_message_queued(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        w.server.keys(b.pane, "-l", "half a thought")
        await w.until(lambda: w.directory.entry(b.pane).reading.composer_empty is False, "a draft")
        await w.send(a, b, "do not join the draft", "m-2")
        assert (await w.status(a, "m-2", wait=1))["outcome"] == "queued"
        w.server.keys(b.pane, "C-u")
        assert await w.final(a, "m-2") == "delivered"
        assert "half a thought" not in b.received()[-1]

    run_world(scenario)


def test_a_replaced_pane_cancels_its_queued_message_at_once(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        await w.hold(b)
        await w.send(a, b, "for the old process", "m-2")
        await w.respawn(b)
        answer = await w.status(a, "m-2", wait=20)
        assert answer["outcome"] == "cancelled"
        # the directory's new incarnation or the exited process's revoked grant, whichever
        # the daemon noticed first: both end the message at once
        assert "incarnation" in answer["reason"] or "Connect" in answer["reason"]
        assert [r["outcome"] for r in w.audit("m-2")] == ["queued", "cancelled"]
        assert not any("for the old process" in p for p in b.received())
        new = w.root / "agents" / "b-again" / "control" / "received"
        assert not new.exists() or "for the old process" not in new.read_text()

    run_world(scenario)


def test_an_old_incarnation_is_refused_on_the_call(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        with pytest.raises(Refused, match="incarnation changed"):
            await w.send(a, b, "hi", "m-1", incarnation="inc_stale")
        with pytest.raises(BadRequest, match="incarnation"):
            await w.gate.run(
                a.actor, "message.send", {"target": b.pane, "text": "x", "message_id": "m-1"}
            )  # type: ignore[arg-type]
        with pytest.raises(BadRequest, match="window indices"):
            await w.send(a, "main:1", "hi", "m-1")
        with pytest.raises(NotFound):
            await w.send(a, "no-such-title", "hi", "m-1")
        assert w.messaging.book.ids_held(a.principal or "") == 0

    run_world(scenario)


def test_a_retried_id_is_refused_and_typed_only_once(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        await w.send(a, b, "exactly once", "m-2")
        with pytest.raises(Conflict, match="never typed twice"):
            await w.send(a, b, "exactly once", "m-2")
        assert await w.final(a, "m-2") == "delivered"
        with pytest.raises(Conflict, match="delivered"):
            await w.send(a, b, "exactly once", "m-2")
        assert sum(p.endswith("exactly once") for p in b.received()) == 1
        assert [r["outcome"] for r in w.audit("m-2")] == ["queued", "delivered"]

    run_world(scenario)


def test_a_pure_agent_is_not_reachable(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a = await w.agent("a")
        pure = await w.agent("pure", preset=None)
        observer = await w.agent("observer", preset=Preset.OBSERVE)
        for target in (pure, observer):
            with pytest.raises(Refused, match="not reachable"):
                await w.send(a, target, "hi", "m-1")
        assert await w.cards() == []

    run_world(scenario)


def test_narrowing_the_recipient_cancels_its_queued_messages_and_cards(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b, c = await w.agent("a"), await w.agent("b"), await w.agent("c")
        await approved_pair(w, a, b)
        await w.hold(b)
        await w.send(a, b, "queued behind a busy turn", "m-2")
        await w.send(c, b, "waiting for a card", "m-3")
        assert len(await w.cards()) == 1
        await w.connect(b, "observe")  # no longer reachable (Off would revoke its token)
        # the toggle has returned: both are final already, and nothing lands afterwards
        assert w.messaging.book.get(a.principal or "", "m-2").outcome.value == "cancelled"  # type: ignore[union-attr]
        assert w.messaging.book.get(c.principal or "", "m-3").outcome.value == "cancelled"  # type: ignore[union-attr]
        assert await w.cards() == []
        b.release()
        await w.until(lambda: w.directory.entry(b.pane).reading.state == "idle", "B idle")
        assert not any("queued behind" in p for p in b.received())
        assert [r["outcome"] for r in w.audit("m-2")] == ["queued", "cancelled"]
        assert [r["outcome"] for r in w.audit("m-3")] == ["queued", "cancelled"]
        # the pair approval died with B's reachability
        await w.connect(b, "collaborate")
        await w.send(a, b, "again", "m-4")
        assert [c["kind"] for c in await w.cards()] == ["message"]

    run_world(scenario)


def test_a_sender_waiting_on_status_is_released_when_revoked(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await w.send(a, b, "needs a card", "m-1")
        waiting = asyncio.ensure_future(w.status(a, "m-1", wait=50))
        await w.until(lambda: a.principal in w.messaging._revoked, "the wait to start")
        await w.connect(a, "off")
        with pytest.raises(NotConnected):
            await asyncio.wait_for(waiting, 5)
        assert w.messaging.book.get(a.principal or "", "m-1").outcome.value == "cancelled"  # type: ignore[union-attr]

    run_world(scenario)


def test_a_ping_pong_past_the_hop_limit_raises_a_card(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b, "ab-0")
        answer = await w.send(b, a, "reply 1", "ba-1")
        [card] = await w.cards()
        await w.decide(card["id"], "approve_pair")
        assert await w.final(b, "ba-1") == "delivered"
        limit = w.messaging.book.limits.hop_limit
        hops = [answer["hop"]]
        for n in range(2, limit + 2):
            sender, to = (a, b) if n % 2 == 0 else (b, a)
            answer = await w.send(sender, to, f"reply {n}", f"hop-{n}")
            hops.append(answer["hop"])
            if answer["hop"] <= limit:
                assert await w.final(sender, f"hop-{n}") == "delivered"
        assert hops == list(range(1, limit + 2))
        [card] = await w.cards()
        assert card["kind"] == "hop_limit"
        assert f"reply {limit + 1} in a conversation, past the limit on replies" in card["summary"]
        # the agents are named by what a person sees of them, never by their session ids
        assert "agent:" not in card["summary"] and b.pane in card["summary"]

    run_world(scenario)


def test_a_flood_is_refused_before_admission_and_holds_no_memory(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        book = w.messaging.book
        before = book.footprint()
        refused = 0
        for i in range(500):
            try:
                await w.send(a, b, "x\x1b[2J" if i % 2 else "y" * 20_000, f"flood-{i}")
            except Refused:
                refused += 1
        assert refused == 500
        assert book.footprint() == before
        assert book.ids_held(a.principal or "") == 0
        with pytest.raises(RateLimited):  # refused this often, the gate no longer runs its calls
            await w.send(a, b, "ok", "after-the-flood")
        # the pair's rate limit itself: admissions beyond the pair's minute are refused
        c = await w.agent("c")
        limit = book.limits.pair_per_minute
        for i in range(limit):
            await w.send(c, b, "ok", f"rate-{i}")
        with pytest.raises(Refused, match="a minute"):
            await w.send(c, b, "ok", "rate-over")
        assert book.get(c.principal or "", "rate-over") is None

    run_world(scenario)


def test_an_ambiguous_handle_is_refused_naming_the_candidates(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b, c = await w.agent("a"), await w.agent("b"), await w.agent("c")
        for agent in (b, c):
            w.server.run("select-pane", "-t", agent.pane, "-T", "billing migration")
        await w.until(
            lambda: len(w.directory.resolve_handle("billing migration")) == 2, "both titled"
        )
        with pytest.raises(Refused, match="ambiguous") as err:
            await w.send(a, "billing migration", "hi", "m-1")
        assert b.pane in err.value.message and c.pane in err.value.message
        w.server.run("select-pane", "-t", c.pane, "-T", "something else")
        await w.until(lambda: len(w.directory.resolve_handle("billing migration")) == 1, "one")
        answer = await w.send(a, "billing migration", "by title", "m-1")
        assert answer["recipient_pane"] == b.pane

    run_world(scenario)


def test_the_human_sees_each_panes_sent_and_received_messages(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        listing = await w.gate.run(w.human, "messages.list", {"pane": b.pane})
        assert [m["message_id"] for m in listing["received"]] == ["hello-1"]
        assert listing["received"][0]["outcome"] == "delivered"
        everything = await w.gate.run(w.human, "messages.list", {})
        assert everything["panes"][a.pane]["sent"][0]["message_id"] == "hello-1"
        json.dumps(everything)
        detail = await w.gate.run(w.human, "directory.pane", {"pane": a.pane})
        assert detail["messages"]["sent"][0]["outcome"] == "delivered"

    run_world(scenario)


def test_an_unconfirmed_message_leaves_the_composer_empty_for_the_next(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        (b.control / "stuck").write_text("")  # B's TUI keeps the pasted text, unsubmitted
        await w.send(a, b, "never submitted", "m-2")
        answer = await w.status(a, "m-2", wait=30)
        assert answer["outcome"] == "unconfirmed"
        assert "the composer was left as found" in answer["reason"]
        await w.until(lambda: w._idle_entry(b.pane), "B idle with an empty composer again")
        assert "never submitted" not in w.server.capture(b.pane)
        assert await w.cards() == []
        (b.control / "stuck").unlink()
        await w.send(a, b, "the next one", "m-3")
        assert await w.final(a, "m-3") == "delivered"
        assert b.received()[-1].endswith("\u2502 the next one")
        assert not any("never submitted" in p for p in b.received())

    run_world(scenario)


def test_a_composer_that_cannot_be_cleared_raises_a_card_for_the_human(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        (b.control / "stuck").write_text("")
        (b.control / "sticky").write_text("")  # and its clear key does nothing
        await w.send(a, b, "left behind", "m-2")
        answer = await w.status(a, "m-2", wait=30)
        assert answer["outcome"] == "unconfirmed"
        assert "a card asks the human" in answer["reason"]
        [card] = await w.cards()
        assert card["kind"] == "composer_left"
        assert b.pane in card["summary"] and "m-2" in card["summary"]
        assert [(r["action"], r["outcome"]) for r in w.audit("m-2")] == [
            ("message.send", "queued"),
            ("message.send", "unconfirmed"),
            ("message.composer_left", "card"),
        ]

    run_world(scenario)


def test_a_message_at_the_byte_cap_is_delivered_intact(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        await approved_pair(w, a, b)
        cap = w.messaging.book.limits.message_bytes
        line = "0123456789" * 9 + "abcdefgh\n"  # 99 characters and a newline
        text = (line * (cap // len(line) + 1))[: cap - 1] + "z"
        assert len(text.encode()) == cap
        await w.send(a, b, text, "m-big")
        assert await w.final(a, "m-big") == "delivered"
        [_, prompt] = b.received()
        assert prompt.split("\n")[1:] == ["\u2502 " + part for part in text.split("\n")]

    run_world(scenario)


def test_a_text_of_many_short_lines_past_the_typed_cap_is_refused(run_world: Run) -> None:
    async def scenario(w: World) -> None:
        a, b = await w.agent("a"), await w.agent("b")
        with pytest.raises(Refused, match="fewer lines") as err:
            await w.send(a, b, "x\n" * 3000, "m-lines")
        assert err.value.field == "text"
        assert b.received() == []

    run_world(scenario)
