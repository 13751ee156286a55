#!/usr/bin/env python3
"""Checks `keel mock-provider` against the official OpenAI, Anthropic and Google Python SDKs.

Usage: check-mock-sdks.py PATH_TO_KEEL

Starts the mock on a free port, then streams through each SDK (Chat Completions, the
Responses API, Anthropic Messages, Gemini: text, reasoning and tool calls, thought
signatures, retries on scripted errors, in-stream errors) and asserts what the SDKs parsed. Exits non-zero on the first
failed check.
"""

import json
import re
import subprocess
import sys
import threading

import anthropic
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

TOOLS_OPENAI_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
TOOLS_RESPONSES = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file",
        "parameters": TOOLS_OPENAI_CHAT[0]["function"]["parameters"],
    }
]
TOOLS_ANTHROPIC = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": TOOLS_OPENAI_CHAT[0]["function"]["parameters"],
    }
]

GEMINI_TOOLS = [
    genai_types.Tool(
        function_declarations=[
            genai_types.FunctionDeclaration(
                name="read_file",
                description="Read a file",
                parameters_json_schema=TOOLS_OPENAI_CHAT[0]["function"]["parameters"],
            )
        ]
    )
]

PASSED = []


def directive(script):
    return "#mock " + json.dumps(script)


def check(name):
    def wrap(fn):
        def run(*args):
            fn(*args)
            PASSED.append(name)
            print(f"ok   {name}", flush=True)

        return run

    return wrap


def start(keel):
    proc = subprocess.Popen(
        [keel, "mock-provider", "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found = {}
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            match = re.search(r"listening on (http://[0-9.:]+)/v1", line)
            if match and not ready.is_set():
                found["root"] = match.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(30) or "root" not in found:
        proc.kill()
        sys.exit("mock provider did not report its address")
    return proc, found["root"]


@check("chat completions: streamed echo with usage")
def chat_text(client):
    stream = client.chat.completions.create(
        model="mock",
        messages=[{"role": "user", "content": "Hello from the SDK"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == "Hello from the SDK", text
    assert finish == "stop", finish
    assert usage is not None and usage.completion_tokens == 4, usage


@check("chat completions: reasoning and tool call via the stream helper")
def chat_tool(client):
    script = {
        "text": "Reading.",
        "reasoning": "Need the file.",
        "tool_calls": [{"name": "read_file", "args": {"path": "notes/today.txt"}}],
        "usage": {"input_tokens": 123456},
    }
    with client.chat.completions.stream(
        model="mock",
        messages=[{"role": "user", "content": "read it\n" + directive(script)}],
        tools=TOOLS_OPENAI_CHAT,
        stream_options={"include_usage": True},
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Reading.", message.content
    assert final.choices[0].finish_reason == "tool_calls"
    call = message.tool_calls[0]
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"path": "notes/today.txt"}
    assert final.usage.prompt_tokens == 123456, final.usage


@check("chat completions: SDK retries past scripted 429s")
def chat_retry(keel_root):
    client = openai.OpenAI(base_url=keel_root + "/v1", api_key="mock", max_retries=2)
    script = {
        "id": "sdk-chat-retry",
        "text": "third time lucky",
        "error": {"status": 429, "retry_after_ms": 10, "times": 2},
    }
    reply = client.chat.completions.create(
        model="mock",
        messages=[{"role": "user", "content": directive(script)}],
    )
    assert reply.choices[0].message.content == "third time lucky"


@check("responses: streamed events, reasoning summary and function call")
def responses_stream(client):
    script = {
        "steps": [
            {
                "text": "Let me read.",
                "reasoning": "Plan it.",
                "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}],
            },
            {"text": "It says hello."},
        ]
    }
    kinds, text, summary = [], "", ""
    stream = client.responses.create(
        model="mock",
        input="read a.txt\n" + directive(script),
        tools=TOOLS_RESPONSES,
        stream=True,
    )
    final = None
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.reasoning_summary_text.delta":
            summary += event.delta
        elif event.type == "response.completed":
            final = event.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert text == "Let me read." and summary == "Plan it.", (text, summary)
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls and calls[0].name == "read_file"
    assert json.loads(calls[0].arguments) == {"path": "a.txt"}
    assert final.usage.output_tokens > 0

    with client.responses.stream(
        model="mock",
        previous_response_id=final.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "hello"}],
        tools=TOOLS_RESPONSES,
    ) as chained:
        second = chained.get_final_response()
    assert second.output_text == "It says hello.", second.output_text
    assert second.previous_response_id == final.id


@check("responses: unknown previous_response_id is a 400")
def responses_unknown(client):
    try:
        client.responses.create(model="mock", input="hi", previous_response_id="resp_missing")
    except openai.BadRequestError as error:
        assert "Previous response with id 'resp_missing' not found." in str(error), error
    else:
        raise AssertionError("expected a BadRequestError")


@check("anthropic: thinking, text and tool_use via the stream helper")
def anthropic_stream(client):
    script = {
        "text": "Sure, reading.",
        "reasoning": "The user wants a file.",
        "tool_calls": [{"name": "read_file", "args": {"path": "docs/a long name.md"}}],
    }
    with client.messages.stream(
        model="mock",
        max_tokens=1024,
        messages=[{"role": "user", "content": "read\n" + directive(script)}],
        tools=TOOLS_ANTHROPIC,
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Sure, reading.", text
    kinds = [block.type for block in final.content]
    assert kinds == ["thinking", "text", "tool_use"], kinds
    assert final.content[0].thinking == "The user wants a file."
    assert final.content[0].signature
    tool = final.content[2]
    assert tool.name == "read_file" and tool.input == {"path": "docs/a long name.md"}, tool
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens > 1


@check("anthropic: in-stream overloaded_error raises")
def anthropic_overloaded(client):
    script = {"text": "a b c", "stream_error": {"after": 1}}
    try:
        with client.messages.stream(
            model="mock",
            max_tokens=100,
            messages=[{"role": "user", "content": directive(script)}],
        ) as stream:
            for _ in stream:
                pass
    except anthropic.APIStatusError as error:
        assert "overloaded" in str(error).lower(), error
    else:
        raise AssertionError("expected an APIStatusError")


@check("anthropic: SDK retries past scripted 529s")
def anthropic_retry(root):
    client = anthropic.Anthropic(base_url=root, api_key="mock", max_retries=2)
    script = {
        "id": "sdk-anthropic-retry",
        "text": "recovered",
        "error": {"status": 529, "retry_after_ms": 10, "times": 2},
    }
    reply = client.messages.create(
        model="mock",
        max_tokens=100,
        messages=[{"role": "user", "content": directive(script)}],
    )
    assert reply.content[0].text == "recovered"


@check("gemini: streamed thoughts, text and usage")
def gemini_stream(client):
    script = {"reasoning": "Think first.", "text": "Hello from Gemini", "usage": {"input_tokens": 42}}
    config = genai_types.GenerateContentConfig(
        thinking_config=genai_types.ThinkingConfig(include_thoughts=True, thinking_budget=256)
    )
    thoughts, text, usage, finish = "", "", None, None
    for chunk in client.models.generate_content_stream(
        model="gemini-2.5-flash", contents="hi\n" + directive(script), config=config
    ):
        usage = chunk.usage_metadata or usage
        candidate = chunk.candidates[0]
        finish = candidate.finish_reason or finish
        for part in (candidate.content.parts if candidate.content else None) or []:
            if part.thought:
                thoughts += part.text
            elif part.text:
                text += part.text
    assert thoughts == "Think first.", thoughts
    assert text == "Hello from Gemini", text
    assert finish == genai_types.FinishReason.STOP, finish
    assert usage is not None and usage.prompt_token_count == 42, usage


@check("gemini: parallel function calls round-trip their thought signature")
def gemini_tools(client):
    script = {
        "steps": [
            {
                "tool_calls": [
                    {"name": "read_file", "args": {"path": "a.txt"}},
                    {"name": "read_file", "args": {"path": "b.txt"}},
                ]
            },
            {"text": "Both read."},
        ]
    }
    config = genai_types.GenerateContentConfig(
        tools=GEMINI_TOOLS,
        automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
    )
    history = [genai_types.Content(role="user", parts=[genai_types.Part(text="read\n" + directive(script))])]
    reply = client.models.generate_content(
        model="gemini-3-pro-preview", contents=history, config=config
    )
    content = reply.candidates[0].content
    calls = [part for part in content.parts if part.function_call]
    assert [c.function_call.args["path"] for c in calls] == ["a.txt", "b.txt"], calls
    assert calls[0].thought_signature, "the first call is signed"
    assert not calls[1].thought_signature, "only the first of parallel calls is signed"
    assert calls[0].function_call.id and calls[1].function_call.id, "Gemini 3 names its calls"
    results = genai_types.Content(
        role="user",
        parts=[
            genai_types.Part.from_function_response(
                name="read_file", response={"output": path}
            )
            for path in ("alpha", "bravo")
        ],
    )
    for part, call in zip(results.parts, calls):
        part.function_response.id = call.function_call.id
    history += [content, results]
    final = client.models.generate_content(
        model="gemini-3-pro-preview", contents=history, config=config
    )
    assert final.text == "Both read.", final.text

    unsigned = content.model_copy(deep=True)
    unsigned.parts[0].thought_signature = None
    try:
        client.models.generate_content(
            model="gemini-3-pro-preview", contents=history[:1] + [unsigned, results], config=config
        )
    except genai_errors.ClientError as error:
        assert error.code == 400 and error.status == "INVALID_ARGUMENT", error
        assert "thought_signature" in error.message, error.message
    else:
        raise AssertionError("expected a ClientError for the unsigned call")


@check("gemini: scripted errors are the SDK's typed errors")
def gemini_errors(client):
    script = {"error": {"status": 429}}
    try:
        client.models.generate_content(model="gemini-2.5-flash", contents=directive(script))
    except genai_errors.ClientError as error:
        assert error.code == 429 and error.status == "RESOURCE_EXHAUSTED", error
    else:
        raise AssertionError("expected a ClientError")
    script = {"text": "a b c", "stream_error": {"after": 1}}
    try:
        for _ in client.models.generate_content_stream(
            model="gemini-2.5-flash", contents=directive(script)
        ):
            pass
    except genai_errors.ServerError as error:
        assert error.code == 503 and error.status == "UNAVAILABLE", error
    else:
        raise AssertionError("expected a ServerError")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    proc, root = start(sys.argv[1])
    try:
        oa = openai.OpenAI(base_url=root + "/v1", api_key="mock", max_retries=0)
        an = anthropic.Anthropic(base_url=root, api_key="mock", max_retries=0)
        chat_text(oa)
        chat_tool(oa)
        chat_retry(root)
        responses_stream(oa)
        responses_unknown(oa)
        anthropic_stream(an)
        anthropic_overloaded(an)
        anthropic_retry(root)
        gm = genai.Client(
            api_key="mock",
            http_options=genai_types.HttpOptions(base_url=root, api_version="v1beta"),
        )
        gemini_stream(gm)
        gemini_tools(gm)
        gemini_errors(gm)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    if proc.returncode not in (0, -15):
        sys.exit(f"mock provider exited with {proc.returncode}")
    print(f"{len(PASSED)} passed, 0 failed")


if __name__ == "__main__":
    main()
