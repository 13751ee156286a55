// A chat page as a Next.js app would write it: `useChat` with the stock transport pointed at
// Keel, `resume: true`, initial messages from Keel, a Stop button, a client-side tool, and an
// edit button on each user message and a regenerate button on each reply; `roll_die` is a
// client-side tool the page runs by itself (counting its runs).
import { useState } from "react";
import { createRoot } from "react-dom/client";
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithToolCalls } from "ai";

const api = "/api/v1/ai-sdk/chat";
const tools = [
  { name: "favourite_colour", description: "Asks the user", parameters: { type: "object" } },
  { name: "roll_die", description: "Rolls a die on the page", parameters: { type: "object" } },
];
/** How many times this page (across reloads) ran `roll_die`, kept per chat. */
const runsKey = (id) => `roll_die runs ${id}`;

function Chat({ id, initialMessages }) {
  const chat = useChat({
    id,
    messages: initialMessages,
    resume: true,
    transport: new DefaultChatTransport({ api, body: { tools } }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    // A tool the page runs by itself: every run is counted, so a test sees one run twice.
    onToolCall: ({ toolCall }) => {
      if (toolCall.toolName !== "roll_die") return;
      localStorage.setItem(runsKey(id), String(Number(localStorage.getItem(runsKey(id)) ?? 0) + 1));
      // Not awaited: the SDK applies it once the stream's chunk is processed.
      chat.addToolResult({ tool: "roll_die", toolCallId: toolCall.toolCallId, output: 4 });
    },
  });
  const { messages, sendMessage, regenerate, stop, status, addToolResult } = chat;
  const [input, setInput] = useState("");
  const onStop = () => {
    stop();
    fetch(`${api}/${id}/stop`, { method: "POST" });
  };
  return (
    <div>
      <div id="status">{status}</div>
      {messages.map((m) => (
        <div key={m.id} className={`message ${m.role}`}>
          {m.role === "user" ? (
            <button className="edit" onClick={() => sendMessage({ text: input, messageId: m.id })}>
              edit
            </button>
          ) : (
            <button className="regenerate" onClick={() => regenerate({ messageId: m.id })}>
              regenerate
            </button>
          )}
          {m.parts.map((p, i) => {
            if (p.type === "text") return <span key={i} className="text">{p.text}</span>;
            if (!p.type.startsWith("tool-")) return null;
            return (
              <div key={i} className="tool" data-tool={p.type} data-state={p.state}>
                {p.state === "output-available" ? <pre className="output">{JSON.stringify(p.output)}</pre> : null}
                {p.type === "tool-favourite_colour" && p.state === "input-available" ? (
                  <button
                    className="answer"
                    onClick={() => addToolResult({ tool: "favourite_colour", toolCallId: p.toolCallId, output: "green" })}
                  >
                    green
                  </button>
                ) : null}
              </div>
            );
          })}
        </div>
      ))}
      <textarea id="input" value={input} onChange={(e) => setInput(e.target.value)} />
      <button
        id="send"
        onClick={() => {
          sendMessage({ text: input });
          setInput("");
        }}
      >
        Send
      </button>
      <button id="stop" onClick={onStop}>
        Stop
      </button>
    </div>
  );
}

const id = new URLSearchParams(location.search).get("chat");
fetch(`${api}/${encodeURIComponent(id)}/messages`)
  .then((r) => r.json())
  .then((initialMessages) =>
    createRoot(document.getElementById("root")).render(<Chat id={id} initialMessages={initialMessages} />),
  );
