"""The control-mode line parser: notifications, command blocks, guards."""

from __future__ import annotations

from openbus.daemon.tmux.control import Block, ControlParser, Notification


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
