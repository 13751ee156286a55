"""The fault matrix (fault-matrix.json) through the Responses door, driven by the official
`openai` Python SDK's `responses.stream` accumulator: in each cell the final response the
SDK built equals the stored one (retrieved through the API), and every stream ends with its
terminal event. The other doors run in fault-matrix.test.mjs.
"""

import json
import os
import time
import unittest
import urllib.request

import openai
from openai import OpenAI

from responses_test import Daemon, mock, words

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "fault-matrix.json")) as f:
    TABLE = json.load(f)
DAEMON = Daemon(TABLE["config"])
IDLE = {"waiting", "requires_action", "error"}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
FUNCTION = {"type": "function", "name": "lookup", "description": "Looks things up",
            "parameters": {"type": "object", "properties": {}}}
SERIAL = [0]


def setUpModule():
    DAEMON.start()


def tearDownModule():
    DAEMON.stop()


def api(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{DAEMON.url}/api/v1{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request) as r:
        text = r.read()
    return json.loads(text) if text else None


def model():
    return next(m["id"] for m in api("GET", "/models")["models"] if m["default"])


def script(cell):
    SERIAL[0] += 1
    steps = []
    for step in cell["steps"]:
        step = dict(step)
        if "words" in step:
            step["text"] = words(step.pop("words"))
        steps.append(step)
    return {"id": f"python-{os.getpid()}-{SERIAL[0]}", "steps": steps}


def chat_of(response_id):
    return response_id[5:37]


def settled(chat):
    deadline = time.time() + 30
    while api("GET", f"/chats/{chat}")["status"] not in IDLE:
        if time.time() > deadline:
            raise AssertionError("the chat did not become idle")
        time.sleep(0.02)


def edit(chat):
    first = next(m for m in api("GET", f"/chats/{chat}/messages")["messages"]
                 if m["role"] == "user")
    text = mock("edited", {"text": "The reply to the edit.", "rate": 50})
    api("PUT", f"/chats/{chat}/messages/{first['id']}", {"text": text})


def finished_text(events):
    """The text of the output items the stream finished (a voided item ends incomplete)."""
    voided = {e.item.id for e in events
              if e.type == "response.output_item.done" and e.item.status == "incomplete"}
    return "".join(e.delta for e in events
                   if e.type == "response.output_text.delta" and e.item_id not in voided)


def items(response):
    return [(i.type, i.id, getattr(i, "call_id", None)) for i in response.output]


class FaultMatrix(unittest.TestCase):
    def check(self, sdk, events, final, terminal, before=()):
        self.assertEqual(events[-1].type, terminal)
        stored = sdk.responses.retrieve(final.id)
        self.assertEqual(final.output_text, stored.output_text)
        self.assertEqual(items(final), items(stored))
        self.assertEqual(finished_text(list(before) + events), stored.output_text,
                         "the streamed text, each character once")
        return stored

    def drive(self, cell):
        sdk = OpenAI(base_url=f"{DAEMON.url}/v1", api_key="keel", max_retries=0)
        kwargs = {"model": model(), "input": mock("go", script(cell))}
        if cell.get("client_tool"):
            kwargs["tools"] = [FUNCTION]
        action = cell.get("action")
        if action == "branch":
            first = sdk.responses.create(**kwargs)
            chat = chat_of(first.id)
            settled(chat)
            reply = api("GET", f"/chats/{chat}/messages")["messages"][-1]
            edit(chat)
            settled(chat)
            edited = next(m for m in api("GET", f"/chats/{chat}/messages")["messages"]
                          if m["role"] == "user")
            api("POST", f"/chats/{chat}/branch", {"message_id": reply["id"]})
            # The response of the branch left is not streamed; the one made current is.
            with self.assertRaises(openai.NotFoundError):
                with sdk.responses.stream(response_id=f"resp_{chat}m{edited['id']:016x}") as s:
                    list(s)
            with sdk.responses.stream(response_id=first.id) as s:
                events = list(s)
                self.check(sdk, events, s.get_final_response(), "response.completed")
            with sdk.responses.stream(model=model(), input="after the switch",
                                      previous_response_id=first.id) as s:
                events = list(s)
                self.check(sdk, events, s.get_final_response(), "response.completed")
            return
        with sdk.responses.stream(**kwargs) as stream:
            events = []
            acted = False
            for event in stream:
                events.append(event)
                if action and not acted and len(finished_text(events)) > 20:
                    acted = True
                    if action == "kill":
                        break
                    edit(chat_of(events[0].response.id))
            if action is None:
                final = stream.get_final_response()
        if action == "kill":
            DAEMON.kill9()
            DAEMON.start()
            last = events[-1].sequence_number
            with sdk.responses.stream(response_id=events[0].response.id,
                                      starting_after=last) as s:
                rest = list(s)
                final = s.get_final_response()
            self.assertTrue(all(e.sequence_number > last for e in rest))
            self.check(sdk, rest, final, "response.completed", before=events)
        elif action == "edit":
            # Its reply left the current branch: the response ends as cancelled (the SDK's
            # get_final_response() takes only `response.completed`).
            final = events[-1].response
            stored = self.check(sdk, events, final, "response.incomplete")
            self.assertEqual(final.status, "cancelled")
            self.assertEqual(stored.status, "cancelled")
        else:
            self.check(sdk, events, final, "response.completed")


def cell_test(cell):
    return lambda self: self.drive(cell)


for number, cell in enumerate(TABLE["scenarios"]):
    name = "".join(c if c.isalnum() else "_" for c in cell["name"].lower())
    setattr(FaultMatrix, f"test_{number:02}_{name}", cell_test(cell))


if __name__ == "__main__":
    unittest.main()
