"""The control-mode line parser: notifications, command blocks, guards; a control client held
between reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from openbus.daemon.tmux import Tmux
from openbus.daemon.tmux.control import (
    Block,
    ControlClient,
    ControlParser,
    Notification,
    TmuxCommandError,
)
from tests.support.tmux import TmuxServer
from tests.support.wait import async_wait_until


def test_output_lines_become_a_pane_id_without_their_payload() -> None:
    parser = ControlParser()
    event = parser.feed(b"%output %12 \\033[?2004hroot@vm:~# ")
    assert event == Notification("output", ("%12",))


def test_a_command_block_collects_its_lines_until_the_matching_end() -> None:
    parser = ControlParser()
    assert parser.feed(b"%begin 1796023836 274 1") is None
    assert parser.feed(b"line one") is None
    assert parser.feed(b"%end 1 2 3") is None  # not this block's guard: a line of output
    block = parser.feed(b"%end 1796023836 274 1")
    assert isinstance(block, Block)
    assert block.ok and block.flags == 1 and block.lines == ["line one", "%end 1 2 3"]


def test_an_error_block_is_not_ok() -> None:
    parser = ControlParser()
    parser.feed(b"%begin 5 6 1")
    parser.feed(b"can't find pane: %99")
    block = parser.feed(b"%error 5 6 1")
    assert isinstance(block, Block) and not block.ok and block.lines == ["can't find pane: %99"]


def test_other_notifications_keep_their_arguments() -> None:
    parser = ControlParser()
    assert parser.feed(b"%window-add @3") == Notification("window-add", ("@3",))
    assert parser.feed(b"%sessions-changed") == Notification("sessions-changed", ())
    assert parser.feed(b"%exit") == Notification("exit", ())
    assert parser.feed(b"plain text outside a block") is None


STREAM = (
    b"%begin 1796023836 273 0\n%end 1796023836 273 0\n"
    b"%output %3 hello\\015\\012\n"
    b"%begin 1796023836 274 1\nline one\n%end 1 2 3\n\n  %end 1796023836 274 1\n"
    b"%end 1796023836 274 1\n"
    b"%window-add @3\n"
    b"%begin 1796023836 275 1\n%end 1796023836 275 1\n"
    b"%begin 1796023836 276 1\ncan't find pane: %99\n%error 1796023836 276 1\n"
    b"%output %4 x\n"
)


def _by_lines(stream: bytes) -> list[object]:
    parser = ControlParser()
    events = [parser.feed(line) for line in stream.split(b"\n")[:-1]]
    return [e for e in events if e is not None]


def test_chunks_split_anywhere_give_the_same_events_as_whole_lines() -> None:
    expected = _by_lines(STREAM)
    assert [type(e).__name__ for e in expected] == [
        "Block", "Notification", "Block", "Notification", "Block", "Block", "Notification"
    ]  # fmt: skip
    body = expected[2]
    assert isinstance(body, Block)
    assert body.lines == ["line one", "%end 1 2 3", "", "  %end 1796023836 274 1"]
    for cut in range(len(STREAM) + 1):
        parser = ControlParser()
        got = parser.feed_data(STREAM[:cut]) + parser.feed_data(STREAM[cut:])
        assert got == expected, cut
    parser = ControlParser()
    one_by_one = [e for i in range(len(STREAM)) for e in parser.feed_data(STREAM[i : i + 1])]
    assert one_by_one == expected and parser.buffered == 0


async def attached_client(
    server: TmuxServer, session: str, heard: Callable[[Notification], object]
) -> ControlClient:
    """A control client on ``session``, once tmux has attached it."""
    tmux = Tmux(server.socket)
    client = ControlClient(tmux.attach_argv(session), tmux.env, lambda _, event: heard(event))
    await client.start()

    async def attached() -> bool:
        try:
            return await client.command("display-message -p attached", 5) == ["attached"]
        except TmuxCommandError:  # (run before its own attach: "no current client")
            return False

    await async_wait_until(attached, what="the client to attach")
    return client


def test_a_held_client_answers_its_commands_and_hears_what_was_printed_once_released(
    server: TmuxServer,
) -> None:
    pane = server.session("held")
    session = server.pane_field(pane, "session_id")

    async def main() -> None:
        heard: list[Notification] = []
        client = await attached_client(server, session, heard.append)
        try:
            client.hold()
            assert await client.command("display-message -p held", 5) == ["held"]
            heard.clear()
            server.send_text(pane, "echo mark-$((6*7))")
            server.keys(pane, "Enter")
            await asyncio.to_thread(server.wait_for, pane, "mark-42")  # (the loop runs on)
            assert Notification("output", (pane,)) not in heard  # nothing read while held
            client.release()

            async def printed() -> bool:
                return Notification("output", (pane,)) in heard

            await async_wait_until(printed, what="the held output to be heard")
        finally:
            await client.close()
        assert client.closed.is_set() and Notification("client-closed") in heard

    asyncio.run(main())


def test_a_line_of_several_commands_answers_once_with_all_their_lines_or_its_first_error(
    server: TmuxServer,
) -> None:
    pane = server.session("several")
    session = server.pane_field(pane, "session_id")

    async def main() -> None:
        client = await attached_client(server, session, lambda event: None)
        try:
            both = "display-message -p one ; display-message -p two"
            failing = "kill-pane -t %999 ; display-message -p never"
            answers = client.send([both, failing], commands=2)
            (after,) = client.send(["display-message -p after"])
            assert await asyncio.wait_for(answers[0], 5) == ["one", "two"]
            try:
                await asyncio.wait_for(answers[1], 5)
                raise AssertionError("a line whose first command fails answered as done")
            except TmuxCommandError as error:
                assert "%999" in str(error)
            # tmux runs nothing of a line after its error: the next line gets its own block
            assert await asyncio.wait_for(after, 5) == ["after"]
        finally:
            await client.close()

    asyncio.run(main())
