// A fake OpenAI-compatible chat completions server on 127.0.0.1 that plays a script of
// assistant turns (tool calls or text), streamed as pi expects (docs/pi.md §2), and records
// every request so tests can read the tool results pi sent back.

import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** A tool call the fake model makes. */
export interface ToolCall {
  name: string;
  args: Record<string, unknown>;
}

/** One assistant turn: tool calls, or a final text. A function computes it from the request. */
export type Turn = { tools: ToolCall[] } | { text: string } | ((req: ChatRequest) => { tools: ToolCall[] } | { text: string });

/** The parts of a chat completions request the tests look at. */
export interface ChatRequest {
  model: string;
  messages: { role: string; content: unknown; tool_call_id?: string; tool_calls?: { id: string; function: { name: string } }[] }[];
  tools?: { function: { name: string } }[];
}

/** A tool result pi sent back, with the call it answers. */
export interface ToolResult {
  id: string;
  name: string;
  text: string;
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((c) => (typeof c === "string" ? c : (c as { text?: string }).text ?? "")).join("");
  return "";
}

export class FakeLLM {
  readonly requests: ChatRequest[] = [];
  private readonly turns: Turn[];
  private server: Server | undefined;
  private callSeq = 0;

  constructor(turns: Turn[]) {
    this.turns = [...turns];
  }

  /** Start listening on an ephemeral port of 127.0.0.1; returns the base URL (…/v1). */
  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      void this.handle(req).then(
        (body) => {
          res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
          res.end(body);
        },
        (err) => {
          res.writeHead(500, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: { message: String(err) } }));
        },
      );
    });
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    const { port } = this.server.address() as AddressInfo;
    return `http://127.0.0.1:${port}/v1`;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  /** Every tool result pi sent back, in order, deduplicated by call id. */
  toolResults(): ToolResult[] {
    const names = new Map<string, string>();
    const seen = new Map<string, ToolResult>();
    for (const req of this.requests) {
      for (const m of req.messages) {
        for (const tc of m.tool_calls ?? []) names.set(tc.id, tc.function.name);
        if (m.role === "tool" && m.tool_call_id && !seen.has(m.tool_call_id)) {
          seen.set(m.tool_call_id, { id: m.tool_call_id, name: names.get(m.tool_call_id) ?? "?", text: textOf(m.content) });
        }
      }
    }
    return [...seen.values()];
  }

  /** The system prompt of the last request. */
  systemPrompt(): string {
    const last = this.requests[this.requests.length - 1];
    return textOf(last?.messages.find((m) => m.role === "system" || m.role === "developer")?.content);
  }

  /** The tool names offered in the last request. */
  offeredTools(): string[] {
    return (this.requests[this.requests.length - 1]?.tools ?? []).map((t) => t.function.name);
  }

  private async handle(req: IncomingMessage): Promise<string> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as ChatRequest;
    this.requests.push(body);
    let turn = this.turns.shift() ?? { text: "(the script has no more turns)" };
    if (typeof turn === "function") turn = turn(body);
    const base = { id: `chatcmpl-${this.requests.length}`, object: "chat.completion.chunk", created: 0, model: body.model };
    const events: object[] = [];
    if ("tools" in turn) {
      turn.tools.forEach((t, index) => {
        const id = `call_${++this.callSeq}`;
        const args = JSON.stringify(t.args);
        events.push({ ...base, choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index, id, type: "function", function: { name: t.name, arguments: "" } }] } }] });
        events.push({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index, function: { arguments: args } }] } }] });
      });
      events.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] });
    } else {
      events.push({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: turn.text } }] });
      events.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
    }
    events.push({ ...base, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
    return `${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("")}data: [DONE]\n\n`;
  }
}
