"""The stub model server on its own, spoken to over real HTTP (no harness CLIs needed)."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from tests.support.stub_model import StubModel, call_tool, hold, reply


def sse_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    name = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[len("data: ") :])))
    return events


def anthropic(stub: StubModel, messages: list[dict[str, Any]], **extra: Any) -> list[Any]:
    body = {"model": "claude-opus-4-8", "stream": True, "messages": messages, **extra}
    with httpx.stream("POST", f"{stub.url}/v1/messages?beta=true", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        return sse_events(response)


def openai(stub: StubModel, items: list[dict[str, Any]], **extra: Any) -> list[Any]:
    body = {"model": "stub-model", "stream": True, "input": items, **extra}
    with httpx.stream("POST", f"{stub.openai_base_url}/responses", json=body) as response:
        assert response.status_code == 200
        return sse_events(response)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def test_an_unscripted_anthropic_turn_streams_ok_in_the_messages_event_order(
    stub_model: StubModel,
) -> None:
    assert httpx.head(stub_model.url).status_code == 200
    events = anthropic(stub_model, [user("<system-reminder>ctx</system-reminder>"), user("hi")])
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "ok"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"
    assert stub_model.turns()[0].prompt == "hi"


def test_a_scripted_anthropic_tool_call_continues_when_its_result_arrives(
    stub_model: StubModel,
) -> None:
    script = stub_model.script(
        call_tool("mcp__openbus__list_panes", {"all": True}),
        reply("saw {tool_result}"),
        match="list the panes",
    )
    first = anthropic(stub_model, [user("please list the panes")], tools=[{"name": "Bash"}])
    block = first[1][1]["content_block"]
    assert block["type"] == "tool_use"
    assert block["name"] == "mcp__openbus__list_panes"
    assert json.loads(first[2][1]["delta"]["partial_json"]) == {"all": True}
    assert first[4][1]["delta"]["stop_reason"] == "tool_use"

    result = {"type": "tool_result", "tool_use_id": block["id"], "content": "pane %1"}
    second = anthropic(
        stub_model,
        [
            user("please list the panes"),
            {"role": "assistant", "content": [block]},
            {"role": "user", "content": [result]},
        ],
    )
    assert second[2][1]["delta"]["text"] == "saw pane %1"
    assert script.tool_results == ["pane %1"]
    assert script.finished.is_set()
    assert stub_model.turns()[0].offered_tools == ["Bash"]
    assert stub_model.turns()[1].tool_results == ["pane %1"]


def test_a_json_title_side_call_gets_schema_valid_json_and_leaves_scripts_alone(
    stub_model: StubModel,
) -> None:
    script = stub_model.script(reply("the real turn"), match="fix the bug")
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    events = anthropic(
        stub_model,
        [user("<session>\nfix the bug\n</session>")],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert json.loads(events[2][1]["delta"]["text"]) == {"title": "Stub title"}
    codex_title = openai(
        stub_model,
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}],
        text={"format": {"type": "json_schema", "schema": schema, "name": "codex_output_schema"}},
    )
    done = [data for name, data in codex_title if name == "response.output_item.done"]
    assert json.loads(done[0]["item"]["content"][0]["text"]) == {"title": "Stub title"}
    assert not script.started.is_set()
    assert [r.kind for r in stub_model.requests] == ["title", "title"]


def test_an_openai_function_call_names_the_mcp_namespace_and_the_tool(
    stub_model: StubModel,
) -> None:
    script = stub_model.script(
        call_tool("mcp__openbus__read_pane", {"pane": "%1"}), reply("read: {tool_result}")
    )
    prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    tools = [{"type": "namespace", "name": "mcp__openbus", "tools": [{"name": "read_pane"}]}]
    first = openai(stub_model, [prompt], tools=tools)
    assert [name for name, _ in first] == [
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    item = first[2][1]["item"]
    assert (item["type"], item["namespace"], item["name"]) == (
        "function_call",
        "mcp__openbus",
        "read_pane",
    )
    assert json.loads(item["arguments"]) == {"pane": "%1"}
    assert stub_model.turns()[0].offered_tools == ["mcp__openbus__read_pane"]

    output = {
        "type": "function_call_output",
        "call_id": item["call_id"],
        "output": [{"type": "input_text", "text": "screen"}],
    }
    second = openai(stub_model, [prompt, item, output])
    names = [name for name, _ in second]
    assert "response.output_text.delta" in names
    done = second[names.index("response.output_item.done")][1]["item"]
    assert done["content"][0]["text"] == "read: screen"
    assert script.last_tool_result == "screen"


def test_a_held_turn_stays_open_until_the_test_releases_it(stub_model: StubModel) -> None:
    script = stub_model.script(hold(), reply("released"), match="slow")
    got: list[Any] = []
    worker = threading.Thread(target=lambda: got.extend(anthropic(stub_model, [user("slow")])))
    worker.start()
    script.wait_holding(timeout=10)
    assert not got
    assert not script.finished.is_set()
    script.release()
    worker.join(timeout=10)
    assert got[2][1]["delta"]["text"] == "released"


def test_scripts_are_taken_by_the_first_turn_whose_prompt_matches(stub_model: StubModel) -> None:
    stub_model.script(reply("for beta"), match="beta")
    stub_model.script(reply("for anyone"))
    assert anthropic(stub_model, [user("alpha")])[2][1]["delta"]["text"] == "for anyone"
    assert anthropic(stub_model, [user("beta")])[2][1]["delta"]["text"] == "for beta"
    assert anthropic(stub_model, [user("gamma")])[2][1]["delta"]["text"] == "ok"


def test_the_mcp_endpoint_lists_and_calls_tools_and_refuses_a_wrong_token(
    stub_model: StubModel,
) -> None:
    stub_model.mcp_token = "right"
    headers = {"Authorization": "Bearer right", "Accept": "application/json, text/event-stream"}

    def rpc(method: str, params: dict[str, Any], auth: dict[str, str]) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(stub_model.mcp_url, json=body, headers=auth)

    init = rpc("initialize", {"protocolVersion": "2025-11-25"}, headers)
    assert init.json()["result"]["protocolVersion"] == "2025-11-25"
    assert init.headers["mcp-session-id"]
    tools = rpc("tools/list", {}, headers).json()["result"]["tools"]
    assert [t["name"] for t in tools] == ["echo"]
    called = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, headers).json()
    assert called["result"]["content"] == [{"type": "text", "text": "echo: hi"}]
    assert rpc("tools/list", {}, {"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(stub_model.mcp_url, headers=headers).status_code == 405
    assert [r.headers.get("authorization") for r in stub_model.mcp_calls("tools/call")] == [
        "Bearer right"
    ]


def chat(stub: StubModel, messages: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    body = {"model": "stub-model", "stream": True, "messages": messages, **extra}
    chunks: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{stub.openai_base_url}/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    return chunks


def test_a_chat_completions_tool_call_continues_when_the_tool_message_arrives(
    stub_model: StubModel,
) -> None:
    script = stub_model.script(
        call_tool("echo", {"text": "x"}), reply("got {tool_result}"), match="use echo"
    )
    tools = [{"type": "function", "function": {"name": "echo", "parameters": {}}}]
    first = chat(stub_model, [{"role": "user", "content": "please use echo"}], tools=tools)
    call = first[1]["choices"][0]["delta"]["tool_calls"][0]
    assert call["function"] == {"name": "echo", "arguments": '{"text": "x"}'}
    assert first[-1]["choices"][0]["finish_reason"] == "tool_calls"
    history = [
        {"role": "user", "content": "please use echo"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "echo: x"},
    ]
    second = chat(stub_model, history, tools=tools)
    assert second[1]["choices"][0]["delta"]["content"] == "got echo: x"
    assert second[-1]["choices"][0]["finish_reason"] == "stop"
    assert script.finished.is_set()
    assert [r.offered_tools for r in stub_model.turns("chat")] == [["echo"], ["echo"]]


def test_a_chat_title_side_call_is_answered_with_the_title_and_leaves_scripts_alone(
    stub_model: StubModel,
) -> None:
    script = stub_model.script(reply("never"))
    system = {"role": "system", "content": "You are a title generator. Output a short title."}
    chunks = chat(stub_model, [system, {"role": "user", "content": "hello"}])
    assert chunks[1]["choices"][0]["delta"]["content"] == stub_model.title
    assert not script.started.is_set()


def gemini(stub: StubModel, contents: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    url = f"{stub.url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    with httpx.stream("POST", url, json={"contents": contents, **extra}) as response:
        assert response.status_code == 200
        data = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert len(data) == 1
    return dict(json.loads(data[0][len("data: ") :]))


def test_a_gemini_function_call_continues_when_its_function_response_arrives(
    stub_model: StubModel,
) -> None:
    stub_model.script(call_tool("echo", {"text": "g"}), reply("got {tool_result}"), match="echo")
    context = {"text": "<session_context>setup</session_context>"}
    asked = {"role": "user", "parts": [context, {"text": "call echo"}]}
    declared = [{"functionDeclarations": [{"name": "echo", "parameters": {}}]}]
    first = gemini(stub_model, [asked], tools=declared)
    part = first["candidates"][0]["content"]["parts"][0]
    assert part["functionCall"]["name"] == "echo" and part["functionCall"]["args"] == {"text": "g"}
    answer = {
        "functionResponse": {
            "id": part["functionCall"]["id"],
            "name": "echo",
            "response": {"output": "echo: g"},
        }
    }
    second = gemini(
        stub_model, [asked, first["candidates"][0]["content"], {"role": "user", "parts": [answer]}]
    )
    text = second["candidates"][0]["content"]["parts"][0]["text"]
    assert text == 'got {"output": "echo: g"}'
    assert stub_model.turns("gemini")[0].prompt == "call echo"
    assert stub_model.turns("gemini")[0].offered_tools == ["echo"]


def test_gemini_side_calls_get_json_for_their_schema_and_leave_scripts_alone(
    stub_model: StubModel,
) -> None:
    script = stub_model.script(reply("never"))
    schema = {
        "type": "OBJECT",
        "properties": {"next_speaker": {"type": "STRING", "enum": ["user", "model"]}},
    }
    url = f"{stub_model.url}/v1beta/models/gemini-2.5-flash:generateContent"
    body = {
        "contents": [{"role": "user", "parts": [{"text": "who speaks?"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseSchema": schema},
    }
    answer = httpx.post(url, json=body).json()
    assert json.loads(answer["candidates"][0]["content"]["parts"][0]["text"]) == {
        "next_speaker": "user"
    }
    assert not script.started.is_set()
