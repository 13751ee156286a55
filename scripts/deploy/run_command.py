#!/usr/bin/env python3
"""Asks a running Keel's model to call run_command and prints what the command returned.

The chat's message names the tool and its arguments, which `keel mock-provider` (and the
built-in demo model) turn into that tool call (docs/mock-provider.md). Exits non-zero unless
the chat finishes with a run_command result that is not an error. Standard library only.
"""

import argparse
import json
import sys
import time
import urllib.request


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--token")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("command")
    args = parser.parse_args()
    headers = {"Content-Type": "application/json"}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"

    def call(method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(args.base + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    text = "run_command " + json.dumps({"command": args.command})
    chat = call("POST", "/api/v1/chats", {"text": text})
    deadline = time.monotonic() + args.timeout
    while call("GET", f"/api/v1/chats/{chat['id']}")["status"] in ("running", "interrupting"):
        if time.monotonic() > deadline:
            sys.exit(f"chat {chat['id']} did not finish in time")
        time.sleep(0.2)
    messages = call("GET", f"/api/v1/chats/{chat['id']}/messages")["messages"]
    results = [
        part
        for message in messages
        for part in message["parts"]
        if part["type"] == "tool_result" and part["tool_name"] == "run_command"
    ]
    if len(results) != 1 or results[0]["is_error"]:
        sys.exit(f"no successful run_command result in chat {chat['id']}: {results}")
    result = results[0]["result"]
    print(result if isinstance(result, str) else json.dumps(result))


if __name__ == "__main__":
    main()
