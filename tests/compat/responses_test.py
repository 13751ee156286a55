"""Keel's OpenAI Responses-compatible endpoints driven by the official `openai` Python SDK.

Run by scripts/compat-test.sh: KEEL_BIN names the keel binary. Each test uses the built-in
demo model; `#mock {...}` lines in the input script its reply (docs/mock-provider.md).
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

import openai
from openai import OpenAI


class Daemon:
    """`keel serve` as a child process; restarts keep the address and the database."""

    def __init__(self, config=""):
        """`config`: the text of a configuration file for `keel serve --config`."""
        self.dir = tempfile.mkdtemp(prefix="keel-compat-py-")
        self.config = config
        self.listen = "127.0.0.1:0"
        self.proc = None
        self.url = None

    def start(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("KEEL_CONFIG", "KEEL_LISTEN", "KEEL_DATABASE_URL",
                            "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
        env["RUST_LOG"] = "info"
        log_path = os.path.join(self.dir, "serve.log")
        args = [os.environ["KEEL_BIN"], "serve", "--listen", self.listen,
                "--database", f"sqlite://{self.dir}/keel.db"]
        if self.config:
            with open(os.path.join(self.dir, "keel.toml"), "w") as config:
                config.write(self.config)
            args += ["--config", os.path.join(self.dir, "keel.toml")]
        with open(log_path, "a") as log:
            offset = log.tell()
            self.proc = subprocess.Popen(
                args, cwd=self.dir, env=env, stdout=subprocess.DEVNULL, stderr=log)
        text = ""
        deadline = time.time() + 30
        while time.time() < deadline:
            with open(log_path) as log:
                log.seek(offset)
                text = log.read()
            match = re.search(r"listening on (http://[0-9.:]+)", text)
            if match:
                self.url = match.group(1)
                self.listen = self.url.removeprefix("http://")
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"keel serve did not start:\n{text}")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc:
            self.kill9()


DAEMON = Daemon()


def setUpModule():
    DAEMON.start()


def tearDownModule():
    DAEMON.stop()


def client(**kw):
    # Single-user mode takes any key; with users it is a Keel token.
    return OpenAI(base_url=f"{DAEMON.url}/v1", api_key="keel", **kw)


def model():
    with urllib.request.urlopen(f"{DAEMON.url}/api/v1/models") as r:
        models = json.load(r)["models"]
    return next(m["id"] for m in models if m["default"])


def words(n, prefix="w"):
    return " ".join(f"{prefix}{i}" for i in range(n))


def mock(text, script):
    return f"{text}\n#mock {json.dumps(script)}"


def until(check, seconds=30, what="condition"):
    deadline = time.time() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def text_deltas(events):
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def read_then_drop(sdk, full, enough):
    """Starts a background response streaming `full`, reads its events until `enough(seen)`,
    and drops the stream: the events seen, the response id and the last number seen."""
    stream = sdk.responses.create(
        model=model(), input=mock(full, {"rate": 40}), stream=True, background=True)
    seen = []
    for event in stream:
        seen.append(event)
        if enough(seen):
            break
    stream.close()
    return seen, seen[0].response.id, seen[-1].sequence_number


class Streaming(unittest.TestCase):
    def test_create_with_stream_follows_the_reference_sequence(self):
        events = list(client().responses.create(
            model=model(), input=mock("hello streaming world", {"rate": 0}), stream=True))
        self.assertEqual(events[0].type, "response.created")
        self.assertEqual(events[1].type, "response.in_progress")
        self.assertEqual(events[-1].type, "response.completed")
        numbers = [e.sequence_number for e in events]
        self.assertEqual(numbers, sorted(set(numbers)), "strictly increasing")
        self.assertEqual(text_deltas(events), "hello streaming world")
        final = events[-1].response
        self.assertEqual(final.output_text, "hello streaming world")
        self.assertEqual(final.status, "completed")
        self.assertTrue(final.id.startswith("resp_"))

    def drop_then_resume(self, kill):
        full = words(120)
        sdk = client()
        seen, response_id, last = read_then_drop(sdk, full, lambda seen: len(text_deltas(seen)) > 30)
        if kill:
            DAEMON.kill9()
            DAEMON.start()
            sdk = client()
        rest = list(sdk.responses.retrieve(response_id, stream=True, starting_after=last))
        # The SDK's own helper filters on the client: it fetches the whole stream and drops
        # the events numbered `last` or less, so the replay must number them as live.
        with sdk.responses.stream(response_id=response_id, starting_after=last) as helper:
            helped = list(helper)
            final = helper.get_final_response()
        self.assertEqual([e.sequence_number for e in helped], [e.sequence_number for e in rest])
        self.assertEqual(text_deltas(seen) + text_deltas(helped), full, "each character once")
        self.assertEqual(final.output_text, full)
        numbers = [e.sequence_number for e in seen + rest]
        self.assertEqual(numbers, sorted(set(numbers)), "nothing twice")
        self.assertTrue(all(e.sequence_number > last for e in rest))
        self.assertEqual(text_deltas(seen) + text_deltas(rest), full, "nothing missing")
        self.assertEqual(rest[-1].type, "response.completed")
        stored = sdk.responses.retrieve(response_id)
        self.assertEqual(stored.status, "completed")
        self.assertEqual(stored.output_text, full)

    def test_drop_the_stream_and_resume_with_starting_after(self):
        self.drop_then_resume(kill=False)

    def test_resume_with_starting_after_across_a_daemon_kill_9(self):
        self.drop_then_resume(kill=True)

    def test_the_sdk_resume_helper_mid_reply_yields_each_character_once(self):
        full = words(150)
        sdk = client()
        seen, response_id, last = read_then_drop(
            sdk, full, lambda seen: sum(e.type == "response.output_text.delta" for e in seen) >= 10)
        # Still replying: the helper's replay is part stored log, part live.
        with sdk.responses.stream(response_id=response_id, starting_after=last) as helper:
            rest = list(helper)
            final = helper.get_final_response()
        self.assertTrue(all(e.sequence_number > last for e in rest))
        self.assertEqual(text_deltas(seen) + text_deltas(rest), full, "each character once")
        self.assertEqual(rest[-1].type, "response.completed")
        self.assertEqual(final.output_text, full)
        served = list(sdk.responses.retrieve(response_id, stream=True, starting_after=last))
        self.assertEqual(text_deltas(seen) + text_deltas(served), full)

    def test_a_function_call_cut_mid_arguments_ends_with_response_completed(self):
        sdk = client()
        tools = [{"type": "function", "name": "lookup", "description": "Looks things up",
                  "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]
        script = {"id": f"py-cut-call-{time.time_ns()}", "steps": [
            {"text": "Looking it up: ", "rate": 0,
             "tool_calls": [{"name": "lookup", "args": {"query": "the weather in Oslo tomorrow"}}],
             "cut": {"after": 5, "times": 1}},
            {"text": "done.", "rate": 0}]}
        with sdk.responses.stream(model=model(), input=mock("go", script), tools=tools) as stream:
            events = list(stream)
            final = stream.get_final_response()
        self.assertEqual(events[-1].type, "response.completed")
        stored = sdk.responses.retrieve(final.id)
        self.assertTrue(stored.output_text.startswith("Looking it up: "))
        self.assertEqual(text_deltas(events), stored.output_text)
        self.assertEqual(final.output_text, stored.output_text)
        self.assertEqual([(i.type, i.id) for i in final.output],
                         [(i.type, i.id) for i in stored.output])
        # Only stored calls were announced, with their own call ids.
        announced = [e.item.call_id for e in events
                     if e.type == "response.output_item.added" and e.item.type == "function_call"]
        self.assertEqual(announced, [i.call_id for i in stored.output if i.type == "function_call"])


class Lifecycle(unittest.TestCase):
    def test_background_then_cancel_keeps_what_was_said(self):
        full = words(300)
        sdk = client()
        created = sdk.responses.create(model=model(), input=mock(full, {"rate": 40}), background=True)
        self.assertIn(created.status, ("queued", "in_progress"))
        until(lambda: len(sdk.responses.retrieve(created.id).output_text) > 20, what="some output")
        cancelled = sdk.responses.cancel(created.id)
        self.assertEqual(cancelled.status, "cancelled")
        self.assertTrue(full.startswith(cancelled.output_text))
        self.assertLess(len(cancelled.output_text), len(full))
        self.assertEqual(sdk.responses.retrieve(created.id).status, "cancelled")

    def test_previous_response_id_continues_the_conversation(self):
        sdk = client()
        first = sdk.responses.create(model=model(), input="first turn")
        self.assertEqual(first.output_text, "first turn")
        second = sdk.responses.create(model=model(), input="second turn",
                                      previous_response_id=first.id)
        self.assertEqual(second.output_text, "second turn")
        self.assertEqual(second.previous_response_id, first.id)
        items = sdk.responses.input_items.list(second.id)
        self.assertEqual(items.data[0].content[0].text, "second turn")
        # Each response still reads as it was.
        self.assertEqual(sdk.responses.retrieve(first.id).output_text, "first turn")

    def test_function_call_round_trip(self):
        sdk = client()
        tools = [{"type": "function", "name": "get_weather", "description": "Weather by city",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
        script = {"steps": [{"tool_calls": [{"name": "get_weather", "args": {"city": "Oslo"}}]},
                            {"text": "Sunny in Oslo."}]}
        first = sdk.responses.create(model=model(), input=mock("weather?", script), tools=tools)
        calls = [item for item in first.output if item.type == "function_call"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertEqual(json.loads(calls[0].arguments), {"city": "Oslo"})
        second = sdk.responses.create(
            model=model(), previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}])
        self.assertEqual(second.output_text, "Sunny in Oslo.")
        self.assertEqual(sdk.responses.input_items.list(second.id).data[0].type,
                         "function_call_output")
        # The first response still ends at its call, streamed or not.
        replay = list(sdk.responses.retrieve(first.id, stream=True))
        self.assertEqual(replay[-1].type, "response.completed")
        self.assertEqual(text_deltas(replay), "")
        self.assertEqual([i.type for i in sdk.responses.retrieve(first.id).output], ["function_call"])


class Errors(unittest.TestCase):
    def test_unknown_response_is_not_found(self):
        with self.assertRaises(openai.NotFoundError):
            client().responses.retrieve("resp_" + "0" * 48)
        with self.assertRaises(openai.NotFoundError):
            client().responses.cancel("nope")

    def test_bad_requests_are_bad_request_errors(self):
        with self.assertRaises(openai.BadRequestError):
            client().responses.create(model="no-such-model", input="hi")
        with self.assertRaises(openai.BadRequestError):
            client().responses.create(model=model(), input="   ")

    def test_a_busy_conversation_is_a_rate_limit(self):
        sdk = client(max_retries=0)
        slow = sdk.responses.create(model=model(), input=mock(words(200), {"rate": 40}),
                                    background=True)
        with self.assertRaises(openai.RateLimitError):
            sdk.responses.create(model=model(), input="next", previous_response_id=slow.id)
        sdk.responses.cancel(slow.id)


if __name__ == "__main__":
    unittest.main()
