"""What stateless clients of the official `openai` Python SDK send Keel's Responses endpoint:
the whole conversation as `input` items every turn, and `previous_response_id` of an older
response.

Run by scripts/compat-test.sh next to responses_test.py, whose daemon it shares.
"""

import unittest

from responses_test import DAEMON, client, mock, model


def setUpModule():
    if DAEMON.proc is None:
        DAEMON.start()


def tearDownModule():
    DAEMON.stop()


def items(response):
    """A response's output as the input items a stateless client sends back."""
    return [item.model_dump(exclude_none=True) for item in response.output]


class StatelessInput(unittest.TestCase):
    def test_three_stateless_turns_with_a_function_tool(self):
        sdk = client()
        tools = [{"type": "function", "name": "lookup", "description": "Looks a word up",
                  "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
        script = {"tool_calls": [{"name": "lookup", "args": {"q": "keel"}}]}
        conversation = [{"role": "user", "content": mock("look up keel", script)}]

        first = sdk.responses.create(model=model(), input=conversation, tools=tools)
        calls = [item for item in first.output if item.type == "function_call"]
        self.assertEqual([c.name for c in calls], ["lookup"])
        self.assertEqual(first.status, "completed")

        # Turn two: the call and its output, and no previous_response_id.
        conversation += items(first)
        conversation.append({"type": "function_call_output", "call_id": calls[0].call_id,
                             "output": "the bottom of a ship"})
        second = sdk.responses.create(model=model(), input=conversation, tools=tools)
        self.assertEqual(second.output_text, "Tool lookup returned: the bottom of a ship")
        self.assertIsNone(second.previous_response_id)

        # Turn three: the reply and a new question; the earlier turns are not joined into it.
        conversation += items(second)
        conversation.append({"role": "user", "content": "and a keel in a sentence?"})
        third = sdk.responses.create(model=model(), input=conversation, tools=tools)
        self.assertEqual(third.output_text, "and a keel in a sentence?")
        stored = sdk.responses.input_items.list(third.id).data
        self.assertEqual([i.type for i in stored], ["message"])

    def test_input_keel_cannot_represent_is_a_bad_request_naming_the_item(self):
        import openai

        with self.assertRaises(openai.BadRequestError) as refused:
            client().responses.create(model=model(), input=[
                {"role": "user", "content": "hi"},
                {"type": "item_reference", "id": "msg_123"},
            ])
        self.assertIn("input[1] (item_reference)", str(refused.exception))


class Forks(unittest.TestCase):
    def test_an_older_previous_response_id_forks(self):
        sdk = client()
        one = sdk.responses.create(model=model(), input="one")
        two = sdk.responses.create(model=model(), input="two", previous_response_id=one.id)
        fork = sdk.responses.create(model=model(), input="fork", previous_response_id=one.id)
        self.assertEqual(fork.output_text, "fork")
        self.assertEqual(fork.previous_response_id, one.id)
        # Both branches keep their responses.
        self.assertEqual(sdk.responses.retrieve(two.id).output_text, "two")
        self.assertEqual(sdk.responses.retrieve(fork.id).output_text, "fork")
        # The fork goes on from itself, and the other branch from its own newest response.
        after_fork = sdk.responses.create(model=model(), input="after fork",
                                          previous_response_id=fork.id)
        self.assertEqual(after_fork.output_text, "after fork")
        after_two = sdk.responses.create(model=model(), input="after two",
                                         previous_response_id=two.id)
        self.assertEqual(after_two.output_text, "after two")


if __name__ == "__main__":
    unittest.main()
