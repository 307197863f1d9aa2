// A stand-in for pi's ExtensionAPI that records what the extension registers and plays
// events and tool calls the way pi does (docs/pi.md §1): tool_call handlers may block,
// execute runs only when none did, and tool_result handlers patch the result.

import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";

type Handler = (event: Record<string, unknown>, ctx: FakeContext) => unknown;

export interface FakeContext {
  cwd: string;
  hasUI: boolean;
  signal?: AbortSignal;
  ui: {
    notify(message: string, level?: string): void;
    setStatus(key: string, text: string | undefined): void;
    confirm(title: string, message: string): Promise<boolean>;
  };
  sessionManager: { getSessionId(): string };
  isProjectTrusted?: () => boolean;
}

/** The outcome of a tool call as the model would see it. */
export interface CallOutcome {
  blocked?: string;
  isError: boolean;
  text: string;
}

export class FakePi {
  readonly tools = new Map<string, Record<string, any>>();
  readonly commands = new Map<string, { handler: (args: string, ctx: FakeContext) => Promise<void> }>();
  readonly flags = new Map<string, boolean | string | undefined>();
  readonly notes: { message: string; level?: string }[] = [];
  readonly statuses: string[] = [];
  /** What ui.confirm asked, and what it answers. */
  readonly confirms: { title: string; message: string }[] = [];
  confirmAnswer = true;
  /** pi's session id (a resumed session keeps its own). */
  sessionId = "session-1";
  private readonly handlers = new Map<string, Handler[]>();
  private seq = 0;

  constructor(
    readonly cwd: string,
    readonly trust?: boolean,
  ) {}

  /** The object handed to the extension. */
  api(): ExtensionAPI {
    const self = this;
    return {
      registerFlag(name: string, opts: { default?: boolean | string }) {
        if (!self.flags.has(name)) self.flags.set(name, opts.default);
      },
      getFlag: (name: string) => self.flags.get(name),
      registerTool: (def: Record<string, any>) => self.tools.set(def.name, def),
      registerCommand: (name: string, opts: { handler: (args: string, ctx: FakeContext) => Promise<void> }) => self.commands.set(name, opts),
      on: (event: string, handler: Handler) => {
        const list = self.handlers.get(event) ?? [];
        list.push(handler);
        self.handlers.set(event, list);
      },
    } as unknown as ExtensionAPI;
  }

  ctx(signal?: AbortSignal): FakeContext {
    return {
      cwd: this.cwd,
      hasUI: true,
      signal,
      ui: {
        notify: (message, level) => this.notes.push({ message, level }),
        setStatus: (key, text) => key === "krunbox" && this.statuses.push(text ?? ""),
        confirm: async (title, message) => {
          this.confirms.push({ title, message });
          return this.confirmAnswer;
        },
      },
      sessionManager: { getSessionId: () => this.sessionId },
      ...(this.trust === undefined ? {} : { isProjectTrusted: () => this.trust as boolean }),
    };
  }

  /** Run an event's handlers; returns the first result that is not undefined. */
  async emit(event: string, payload: Record<string, unknown> = {}, ctx = this.ctx()): Promise<any> {
    for (const h of this.handlers.get(event) ?? []) {
      const r = await h({ type: event, ...payload }, ctx);
      if (r !== undefined) return r;
    }
    return undefined;
  }

  /** Play one tool call through the gate, the tool and tool_result, as pi does. */
  async call(toolName: string, input: Record<string, unknown>, signal?: AbortSignal): Promise<CallOutcome> {
    const toolCallId = `call-${++this.seq}`;
    const ctx = this.ctx(signal);
    let gate: { block?: boolean; reason?: string } | undefined;
    try {
      gate = await this.emit("tool_call", { toolName, toolCallId, input }, ctx);
    } catch (err) {
      return { blocked: `tool_call handler threw: ${(err as Error).message}`, isError: true, text: "" };
    }
    if (gate?.block) return { blocked: gate.reason ?? "blocked", isError: true, text: gate.reason ?? "" };
    const tool = this.tools.get(toolName);
    let content: { type: string; text?: string }[];
    let isError = false;
    if (!tool) {
      content = [{ type: "text", text: `Tool ${toolName} not found` }];
      isError = true;
    } else {
      try {
        const r = await tool.execute(toolCallId, input, signal, undefined, ctx);
        content = r.content;
        isError = r.isError === true;
      } catch (err) {
        content = [{ type: "text", text: (err as Error).message }];
        isError = true;
      }
    }
    const patched = await this.emit("tool_result", { toolCallId, toolName, input, content, isError }, ctx);
    if (patched?.content) content = patched.content;
    return { isError, text: content.map((c) => c.text ?? "").join("") };
  }

  /** Run a /command. */
  async command(name: string, args: string): Promise<void> {
    const cmd = this.commands.get(name);
    if (!cmd) throw new Error(`no command ${name}`);
    await cmd.handler(args, this.ctx());
  }

  /** The last status text. */
  status(): string {
    return this.statuses[this.statuses.length - 1] ?? "";
  }
}

/** Register a tool as another extension would (it would run on the host). */
export function registerHostTool(pi: FakePi, name: string, onRun: () => void): void {
  pi.tools.set(name, {
    name,
    execute: async () => {
      onRun();
      return { content: [{ type: "text", text: `${name} ran on the host` }] };
    },
  });
}
