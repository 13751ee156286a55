#!/usr/bin/env python3
"""Starts a chat on a running Keel and follows it to the end, as a client would.

The reply is scripted (`#mock`, docs/mock-provider.md) to stream the numbered words
`w001 w002 ...` at a steady pace. The client follows the chat's live events, reconnecting with
`Last-Event-ID` whenever its connection drops; after `--then-after` text deltas it runs
`--then` once (a command that stops or kills a replica). It passes when the chat ends
`waiting` with the whole reply committed, and the deltas it saw since the last
`stream_reset` spell exactly that reply: nothing missed, nothing twice.

Prints one JSON line: the chat id, its replies, reconnects and resets. Standard library only.
"""

import argparse
import http.client
import json
import subprocess
import sys
import time
import urllib.parse


def main():
    args = parse_args()
    api = Api(args.base, args.token)
    words = " ".join(f"w{i:03d}" for i in range(1, args.words + 1))
    script = json.dumps({"text": words, "rate": args.rate})
    chat = api.json("POST", "/api/v1/chats", {"text": f"count for me\n#mock {script}"})
    chat_id = chat["id"]
    follower = Follower(api, chat_id, args)
    follower.follow(deadline=time.monotonic() + args.timeout)
    committed = last_reply(api, chat_id)
    summary = {
        "chat": chat_id,
        "reply_words": len(committed.split()),
        "reconnects": follower.reconnects,
        "stream_resets": follower.resets,
        "then_ran": follower.then_ran,
    }
    print(json.dumps(summary))
    fail_unless(committed == words, f"the committed reply is not the scripted one: {committed!r}")
    fail_unless(
        follower.seen_at_commit == committed,
        f"the live deltas spell {follower.seen_at_commit!r}, not the committed reply",
    )
    fail_unless(args.then is None or follower.then_ran, "the --then command never ran")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="http://HOST:PORT of Keel or its proxy")
    parser.add_argument("--token", help="a user's bearer token")
    parser.add_argument("--words", type=int, default=120)
    parser.add_argument("--rate", type=int, default=15, help="words per second")
    parser.add_argument("--then", help="a shell command to run once mid-reply")
    parser.add_argument("--then-after", type=int, default=20, help="text deltas before --then")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds in all")
    return parser.parse_args()


class Api:
    def __init__(self, base, token):
        url = urllib.parse.urlsplit(base)
        self.host, self.port = url.hostname, url.port or 80
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def connection(self, timeout):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def json(self, method, path, body=None):
        """One request, tried again while the proxy finds no replica (502/503) or the
        connection drops: both happen for a moment while a replica is being replaced."""
        for attempt in range(60):
            try:
                conn = self.connection(timeout=30)
                headers = dict(self.headers)
                data = None
                if body is not None:
                    data = json.dumps(body).encode()
                    headers["Content-Type"] = "application/json"
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                text = response.read().decode()
                conn.close()
            except (OSError, http.client.HTTPException):
                time.sleep(0.5)
                continue
            if response.status in (502, 503, 504):
                time.sleep(0.5)
                continue
            if response.status >= 400:
                sys.exit(f"{method} {path}: {response.status} {text}")
            return json.loads(text)
        sys.exit(f"{method} {path}: no answer after {attempt + 1} attempts")


class Follower:
    """The chat's live events, across reconnects, until the chat waits after a reply."""

    def __init__(self, api, chat_id, args):
        self.api, self.chat_id, self.args = api, chat_id, args
        self.last_id = None
        self.seen = ""
        self.deltas = 0
        self.reconnects = 0
        self.resets = 0
        self.then_ran = False
        self.replied = False
        self.seen_at_commit = None

    def follow(self, deadline):
        while time.monotonic() < deadline:
            try:
                if self.stream(deadline):
                    return
            except (OSError, http.client.HTTPException):
                pass
            self.reconnects += 1
            time.sleep(0.2)
        sys.exit(f"chat {self.chat_id} did not finish in time; saw {self.deltas} deltas")

    def stream(self, deadline):
        """One connection; True once the chat is done."""
        conn = self.api.connection(timeout=20)
        headers = dict(self.api.headers, Accept="text/event-stream")
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        conn.request("GET", f"/api/v1/chats/{self.chat_id}/events", headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            response.read()
            conn.close()
            return False
        event = {}
        while time.monotonic() < deadline:
            line = response.readline()
            if not line:
                conn.close()
                return False
            line = line.decode().rstrip("\r\n")
            if line == "":
                if event and self.handle(event):
                    conn.close()
                    return True
                event = {}
            elif line.startswith(":"):
                continue
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                event[name] = event.get(name, "") + value
        conn.close()
        return False

    def handle(self, event):
        if "id" in event:
            self.last_id = event["id"]
        kind = event.get("event", "message")
        data = json.loads(event.get("data") or "null")
        if kind == "part" and data["role"] == "assistant" and data["part"]["type"] == "text":
            self.seen += data["part"]["text"]
            self.deltas += 1
            if self.args.then and not self.then_ran and self.deltas >= self.args.then_after:
                self.then_ran = True
                subprocess.run(self.args.then, shell=True, check=True)
        elif kind == "stream_reset":
            self.resets += 1
            self.seen = ""
        elif kind == "message" and data["role"] == "assistant":
            # The live parts this message replaces must spell it.
            self.seen_at_commit = self.seen
            self.replied = True
        elif kind == "status":
            if data["status"] == "error":
                sys.exit(f"chat {self.chat_id} failed: {data.get('last_error')}")
            return self.replied and data["status"] == "waiting"
        return False


def last_reply(api, chat_id):
    messages = api.json("GET", f"/api/v1/chats/{chat_id}/messages")["messages"]
    replies = [m for m in messages if m["role"] == "assistant"]
    fail_unless(len(replies) == 1, f"expected one reply, got {len(replies)}")
    return text_of(replies[0])


def text_of(message):
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def fail_unless(condition, message):
    if not condition:
        sys.exit(f"FAIL: {message}")


if __name__ == "__main__":
    main()
