// The pi extension: every tool of the agent runs in the project's krunbox sandbox, and
// nothing runs on the host unless the user said so (/krunbox off, enabled = false,
// --krunbox-off, or fallback = "host"), in which case every host call is labelled.
//
// Fail-closed by construction (see ../../docs/serve-protocol.md and the README):
// - session_start never throws; any failure becomes a state that the gate reports;
// - the tool_call gate blocks routed tools until the sandbox is ready (waiting while it
//   starts) and blocks tools of other extensions, which would run on the host;
// - the routed tools' operations fetch the ready sandbox on every call and throw without
//   one, so a call that got past the gate still cannot fall back to the host;
// - user_bash (!cmd) always answers with sandbox operations or a blocked result, never
//   with nothing (which pi would run on the host).

import { readFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  createBashToolDefinition,
  createEditToolDefinition,
  createFindToolDefinition,
  createGrepToolDefinition,
  createLocalBashOperations,
  createLsToolDefinition,
  createReadToolDefinition,
  createWriteToolDefinition,
  type ExtensionAPI,
  type ExtensionContext,
} from "@mariozechner/pi-coding-agent";
import { describeBinary, type FoundBinary, findKrunbox, PACKAGE_ROOT } from "./binary.ts";
import { ConfigError, describeConfig, type LoadedConfig, loadConfig } from "./config.ts";
import { type BashExecOptions, FirstRead, GuestFS, guestBashOperations, guestGlob, LsCache, withCallSignal } from "./guest.ts";
import { type GrepParams, guestGrep } from "./grep.ts";
import { ServeClient } from "./rpc.ts";
import { agentPingMs, NotReadyError, SandboxController, type State } from "./sandbox.ts";
import { workspaceTrust } from "./trust.ts";
import { ISOLATED_COMMANDS, isolatedCommand } from "./isolated.ts";
import { findWorkspace, isolatedSandboxName, refusedWorkspace, sandboxName } from "./workspace.ts";

/** The tools the extension runs in the sandbox. */
export const ROUTED_TOOLS = ["bash", "read", "write", "edit", "ls", "find", "grep"] as const;
type RoutedTool = (typeof ROUTED_TOOLS)[number];
const ROUTED = new Set<string>(ROUTED_TOOLS);

/** The footer status key. */
export const STATUS_KEY = "krunbox";

/** The text prepended to the result of every call that ran on the host. */
export function hostLabel(why: string): string {
  return `[krunbox] ran on the HOST, not in the sandbox (${why})`;
}

const VERSION: string = (() => {
  try {
    return JSON.parse(readFileSync(path.join(PACKAGE_ROOT, "package.json"), "utf8")).version;
  } catch {
    return "dev";
  }
})();

type Where = "sandbox" | "host";
// pi's ToolDefinition is generic over each tool's schema; the wrappers pass them through.
type AnyDefinition = any;
type Say = (text: string, level?: "info" | "warning" | "error") => void;

/** Options for tests: where to find krunbox, which environment to read. */
export interface ExtensionOptions {
  env?: NodeJS.ProcessEnv;
  /** pi's command line (for --approve). */
  argv?: string[];
  findBinary?: (env: NodeJS.ProcessEnv) => FoundBinary;
}

/** The extension's state for one pi session (a new instance comes with /new, /reload...). */
export class KrunboxExtension {
  private readonly env: NodeJS.ProcessEnv;
  private readonly argv: string[];
  private readonly findBinary: (env: NodeJS.ProcessEnv) => FoundBinary;
  private ctrl: SandboxController | undefined;
  private loaded: LoadedConfig | undefined;
  private binary: FoundBinary | undefined;
  /** Set when the extension cannot even try (bad config, no krunbox): every tool is blocked. */
  private setupError: string | undefined;
  /** Why tools run on the host, or undefined while sandboxed. */
  private hostReason: string | undefined;
  private ctx: ExtensionContext | undefined;
  private workspace = "";
  private readonly decisions = new Map<string, Where>();
  private readonly labels = new Map<string, string>();
  private readonly definitions = new Map<string, AnyDefinition>();
  private readonly gfs = new GuestFS(() => this.sandbox().ready());
  private lastNotified: string | undefined;
  private warnedRpcBash = false;

  constructor(
    private readonly pi: ExtensionAPI,
    opts: ExtensionOptions = {},
  ) {
    this.env = opts.env ?? process.env;
    this.argv = opts.argv ?? process.argv;
    this.findBinary = opts.findBinary ?? findKrunbox;
  }

  /** Register tools, flags, commands and event handlers. Starts nothing. */
  register(): void {
    const pi = this.pi;
    pi.registerFlag("krunbox-image", { description: "krunbox: image of the project's sandbox", type: "string" });
    pi.registerFlag("krunbox-network", { description: "krunbox: network of the sandbox (public, allow=RULE,..., open, tsi or none)", type: "string" });
    pi.registerFlag("krunbox-off", {
      description: "krunbox: run tools on the host, not in the sandbox (every call labelled)",
      type: "boolean",
      default: false,
    });
    this.registerTools();
    pi.registerCommand("krunbox", {
      description: "krunbox sandbox: status | on | off | restart | logs | config | network allow|deny RULE... | diff | export | land | workspaces",
      getArgumentCompletions: (prefix: string) =>
        ["status", "on", "off", "restart", "logs", "config", "network", ...ISOLATED_COMMANDS].filter((c) => c.startsWith(prefix)).map((c) => ({ value: c, label: c })),
      handler: async (args: string, ctx: ExtensionContext) => this.command(args.trim(), ctx),
    });
    pi.on("session_start", async (_event, ctx) => this.sessionStart(ctx));
    pi.on("session_shutdown", async () => this.sessionShutdown());
    pi.on("tool_call", async (event, ctx) => this.gate(event.toolName, event.toolCallId, ctx));
    pi.on("tool_result", async (event) => this.labelResult(event.toolCallId, event.content));
    pi.on("user_bash", async (event, ctx) => this.userBash(event.command, ctx));
    pi.on("before_agent_start", async (event) => this.systemPrompt(event.systemPrompt));
  }

  // ---- session ----

  private sessionStart(ctx: ExtensionContext): void {
    this.ctx = ctx;
    if (!this.warnedRpcBash && rpcBashBypasses(ctx, this.argv)) {
      this.warnedRpcBash = true;
      this.say(RPC_BASH_WARNING, "warning");
    }
    try {
      this.workspace = findWorkspace(ctx.cwd);
      this.setupError = undefined;
      this.hostReason = undefined;
      const refused = refusedWorkspace(this.workspace, this.env);
      if (refused) {
        this.setupError = refused;
        this.refresh();
        return;
      }
      if (!this.loadSettings(ctx)) return;
      const loaded = this.loaded as LoadedConfig;
      if (!loaded.config.enabled) {
        this.hostReason = `enabled = false (${loaded.sources.enabled})`;
        this.refresh();
        return;
      }
      this.startSandbox();
    } catch (err) {
      this.setupError = `setup failed: ${err instanceof Error ? err.message : String(err)}`;
      this.refresh();
    }
  }

  /** Load config and find the binary; on failure set setupError and return false. */
  private loadSettings(ctx: ExtensionContext): boolean {
    const trustFn = (ctx as { isProjectTrusted?: () => boolean }).isProjectTrusted;
    let piTrustsProject: boolean | undefined;
    let trustNote: string;
    try {
      const piSays = typeof trustFn === "function" ? trustFn.call(ctx) === true : undefined;
      ({ trusted: piTrustsProject, note: trustNote } = workspaceTrust({ piSays, cwd: ctx.cwd, workspace: this.workspace, env: this.env, argv: this.argv }));
    } catch {
      piTrustsProject = undefined;
      trustNote = "pi: isProjectTrusted() failed";
    }
    try {
      this.loaded = loadConfig({
        workspace: this.workspace,
        env: this.env,
        piTrustsProject,
        trustNote,
        cwd: ctx.cwd,
        flags: {
          "krunbox-image": this.pi.getFlag("krunbox-image") as string | undefined,
          "krunbox-network": this.pi.getFlag("krunbox-network") as string | undefined,
          "krunbox-off": this.pi.getFlag("krunbox-off") as boolean | undefined,
        },
      });
    } catch (err) {
      this.setupError = err instanceof ConfigError ? `configuration: ${err.message}` : `configuration: ${String(err)}`;
      this.refresh();
      return false;
    }
    for (const w of this.loaded.warnings) this.say(`krunbox: ${w}`, "warning");
    try {
      this.binary = this.findBinary(this.env);
    } catch (err) {
      this.setupError = (err as Error).message;
      this.refresh();
      return false;
    }
    return true;
  }

  private startSandbox(): void {
    const loaded = this.loaded as LoadedConfig;
    const binary = this.binary as FoundBinary;
    if (this.ctrl) {
      this.ctrl.setConfig(loaded.config, loaded.imageTrusted);
    } else {
      this.ctrl = new SandboxController({
        name: this.sandboxName(loaded.config.workspace),
        workspace: this.workspace,
        config: loaded.config,
        imageTrusted: loaded.imageTrusted,
        connect: () =>
          ServeClient.connect({ bin: binary.path, env: this.env, cwd: this.workspace }, { name: "pi-krunbox", version: VERSION }),
      });
      this.ctrl.onChange((s) => this.onState(s));
      // Once per session, when it first starts a sandbox: which krunbox, and why that one.
      if (this.ctx?.hasUI) this.say(`krunbox: using ${describeBinary(binary)}`);
    }
    void this.ctrl.start();
    this.refresh();
  }

  /**
   * The sandbox of this session: the project's, or with workspace = "isolated" the
   * session's own (named after pi's session id, so a resumed session finds it again).
   */
  private sandboxName(workspace: "live" | "isolated"): string {
    if (workspace !== "isolated") return sandboxName(this.workspace);
    const sm = (this.ctx as { sessionManager?: { getSessionId?: () => string } } | undefined)?.sessionManager;
    const id = typeof sm?.getSessionId === "function" ? sm.getSessionId() : undefined;
    return isolatedSandboxName(this.workspace, id || `pid-${process.pid}`);
  }

  private async sessionShutdown(): Promise<void> {
    const ctrl = this.ctrl;
    this.ctrl = undefined;
    this.ctx = undefined;
    await ctrl?.dispose();
  }

  private sandbox(): SandboxController {
    if (!this.ctrl) throw new Error(this.setupError ?? "the krunbox sandbox is not set up");
    return this.ctrl;
  }

  private onState(s: State): void {
    this.refresh();
    const loaded = this.loaded;
    if (s.kind === "failed" && loaded?.config.fallback === "host" && !this.hostReason) {
      this.hostReason = `fallback = "host" (${loaded.sources.fallback}) because ${s.reason}`;
      this.say(`krunbox: the sandbox could not start: ${s.reason}. Tools now run on the HOST (fallback = "host").`, "warning");
      this.refresh();
      return;
    }
    const key = `${s.kind}:${s.kind === "failed" ? s.reason : ""}`;
    if (s.kind === "failed" && key !== this.lastNotified) {
      this.say(`krunbox: the sandbox could not start: ${s.reason}${s.hint ? `\nhint: ${s.hint}` : ""}\nTools are blocked. /krunbox restart to retry, /krunbox off to run tools on the host.`, "error");
    }
    if (s.kind === "unresponsive" && key !== this.lastNotified) {
      this.say(`krunbox: the sandbox is unresponsive: ${s.reason}\nTools are blocked until it answers again. ${s.hint}; /krunbox off runs tools on the host.`, "error");
    }
    if (s.kind === "ready" && this.lastNotified === "unresponsive:") this.say("krunbox: the sandbox answers again; tools run in it.");
    this.lastNotified = key;
  }

  // ---- status line and messages ----

  /** The footer text for the current state. */
  statusText(): string {
    if (this.hostReason) return `krunbox: HOST (${this.hostReason})`;
    if (this.setupError) return `krunbox: blocked (${this.setupError})`;
    const s = this.ctrl?.state ?? { kind: "idle" };
    switch (s.kind) {
      case "idle":
        return "krunbox: not started";
      case "starting":
        return `krunbox: starting${s.progress ? ` (${s.progress})` : "…"}`;
      case "ready":
        return `krunbox: ready (${s.status.image ?? "?"}, ${s.status.name})`;
      case "stopped":
        return `krunbox: stopped (${s.reason}); starts again at the next tool call`;
      case "unresponsive":
        return `krunbox: blocked (unresponsive: ${s.reason})`;
      case "failed":
        return `krunbox: blocked (${s.reason})`;
    }
  }

  private refresh(): void {
    const ui = this.ctx?.ui;
    if (!ui) return;
    const text = this.statusText();
    const theme = (ui as { theme?: { fg(color: string, t: string): string } }).theme;
    const color = this.hostReason ? "warning" : /blocked|stopped/.test(text) ? "error" : "dim";
    try {
      ui.setStatus(STATUS_KEY, theme ? theme.fg(color, text) : text);
    } catch {
      // A stale context after the session ended: nothing to show.
    }
  }

  private say: Say = (text, level = "info") => {
    const ctx = this.ctx;
    if (ctx?.hasUI) ctx.ui.notify(text, level);
    else process.stderr.write(`${text}\n`);
  };

  // ---- the gate ----

  private currentRoute(): Where {
    return this.hostReason ? "host" : "sandbox";
  }

  private async gate(toolName: string, toolCallId: string, ctx: ExtensionContext): Promise<{ block: true; reason: string } | undefined> {
    if (this.hostReason) {
      this.decisions.set(toolCallId, "host");
      this.labels.set(toolCallId, hostLabel(this.hostReason));
      return undefined;
    }
    if (this.setupError) {
      return { block: true, reason: `krunbox: blocked, nothing ran: ${this.setupError}. Fix it, or /krunbox off to run tools on the host.` };
    }
    if (!ROUTED.has(toolName)) {
      if (this.loaded?.config.pass_through_tools.includes(toolName)) {
        this.labels.set(toolCallId, hostLabel(`"${toolName}" is in pass_through_tools`));
        return undefined;
      }
      return {
        block: true,
        reason: `krunbox: the tool "${toolName}" would run on the host, outside the sandbox, so it is blocked. To allow it, add it to pass_through_tools in your krunbox configuration.`,
      };
    }
    try {
      await this.sandbox().waitReady(ctx.signal);
    } catch (err) {
      return {
        block: true,
        reason: `krunbox: blocked, nothing ran: ${err instanceof Error ? err.message : String(err)}. See /krunbox status; /krunbox restart to retry; /krunbox off to run tools on the host.`,
      };
    }
    this.decisions.set(toolCallId, "sandbox");
    return undefined;
  }

  private labelResult<C>(toolCallId: string, content: C[]): { content: (C | { type: "text"; text: string })[] } | undefined {
    const label = this.labels.get(toolCallId);
    if (!label) return undefined;
    this.labels.delete(toolCallId);
    return { content: [{ type: "text", text: `${label}\n` }, ...content] };
  }

  // ---- tools ----

  private guestEnv(): Record<string, string> {
    const config = this.loaded?.config;
    if (!config) return {};
    const env: Record<string, string> = { ...config.env };
    for (const name of config.env_passthrough) {
      const v = this.env[name];
      if (v !== undefined) env[name] = v;
    }
    return env;
  }

  private bashOperations() {
    return guestBashOperations(
      () => this.sandbox().ready(),
      () => this.guestEnv(),
      () => {
        const shell = this.loaded?.config.shell;
        return shell && shell !== "auto" ? shell : undefined;
      },
    );
  }

  private definition(tool: RoutedTool, cwd: string, where: Where): AnyDefinition {
    const key = `${where}\u0000${tool}\u0000${cwd}`;
    let def = this.definitions.get(key);
    if (!def) {
      def = where === "host" ? HOST_DEFINITIONS[tool](cwd) : this.sandboxDefinition(tool, cwd);
      this.definitions.set(key, def);
    }
    return def;
  }

  private sandboxDefinition(tool: RoutedTool, cwd: string): AnyDefinition {
    const gfs = this.gfs;
    switch (tool) {
      case "bash":
        return createBashToolDefinition(cwd, { operations: this.bashOperations(), exposeSessionEnvironment: false } as never);
      case "read": {
        const first = new FirstRead(gfs);
        return createReadToolDefinition(cwd, {
          operations: {
            readFile: (p: string) => first.readFile(p),
            access: (p: string) => first.access(p),
            detectImageMimeType: (p: string) => first.detectImageMimeType(p),
          },
        } as never);
      }
      case "write":
        return createWriteToolDefinition(cwd, {
          operations: { writeFile: (p: string, c: string) => gfs.writeFile(p, c), mkdir: (d: string) => gfs.mkdirAll(d) },
        });
      case "edit": {
        const first = new FirstRead(gfs);
        return createEditToolDefinition(cwd, {
          operations: {
            readFile: (p: string) => first.readFile(p),
            writeFile: (p: string, c: string) => gfs.writeFile(p, c),
            access: (p: string) => first.access(p),
          },
        });
      }
      case "ls": {
        const cache = new LsCache(gfs);
        return createLsToolDefinition(cwd, {
          operations: { exists: (p: string) => cache.exists(p), stat: (p: string) => cache.stat(p), readdir: (p: string) => cache.readdir(p) },
        } as never);
      }
      case "find":
        return createFindToolDefinition(cwd, {
          operations: {
            exists: (p: string) => gfs.exists(p),
            glob: (pattern: string, dir: string, o: { ignore: string[]; limit: number }) => guestGlob(this.sandbox().ready(), pattern, dir, o),
          },
        });
      case "grep": {
        const base = createGrepToolDefinition(cwd);
        return {
          ...base,
          execute: async (_id: string, params: GrepParams, signal: AbortSignal | undefined, _onUpdate: unknown, ctx?: { cwd?: string }) => {
            const r = this.sandbox().ready();
            const searchPath = resolveToCwd(params.path || ".", ctx?.cwd || cwd);
            let type: string;
            try {
              type = (await gfs.stat(searchPath)).type;
            } catch {
              throw new Error(`Path not found: ${searchPath}`);
            }
            return guestGrep(r, params, searchPath, type === "dir", signal);
          },
        };
      }
    }
  }

  private registerTools(): void {
    const cwd0 = process.cwd();
    for (const tool of ROUTED_TOOLS) {
      const meta = this.definition(tool, cwd0, "sandbox");
      this.pi.registerTool({
        ...meta,
        execute: async (toolCallId: string, params: unknown, signal: AbortSignal | undefined, onUpdate: unknown, ctx: ExtensionContext) => {
          const where = this.decisions.get(toolCallId) ?? this.currentRoute();
          this.decisions.delete(toolCallId);
          const cwd = ctx?.cwd || cwd0;
          if (where === "host") return this.definition(tool, cwd, "host").execute(toolCallId, params, signal, onUpdate, ctx);
          this.sandbox().ready(); // throws NotReadyError: never falls through to the host
          const def = this.definition(tool, cwd, "sandbox");
          return withCallSignal(signal, () => def.execute(toolCallId, params, signal, onUpdate, ctx));
        },
      });
    }
  }

  // ---- !cmd ----

  private async userBash(command: string, ctx: ExtensionContext) {
    const blocked = (why: string) => ({
      result: {
        output: `krunbox: blocked, "${command}" did not run: ${why}\n/krunbox status for details; /krunbox off to run commands on the host.\n`,
        exitCode: 1,
        cancelled: false,
        truncated: false,
      },
    });
    try {
      if (this.hostReason) {
        const local = createLocalBashOperations();
        const label = `${hostLabel(this.hostReason)}\n`;
        return {
          operations: {
            exec: (cmd: string, cwd: string, opts: BashExecOptions) => {
              opts.onData(Buffer.from(label));
              return local.exec(cmd, cwd, opts as never);
            },
          },
        };
      }
      if (this.setupError) return blocked(this.setupError);
      await this.sandbox().waitReady(ctx.signal);
      return { operations: this.bashOperations() };
    } catch (err) {
      // Never throw: pi 0.73 runs the command on the host when a user_bash handler throws.
      return blocked(err instanceof NotReadyError || err instanceof Error ? err.message : String(err));
    }
  }

  // ---- system prompt ----

  private systemPrompt(prompt: string): { systemPrompt: string } | undefined {
    if (this.hostReason || !this.ctrl) return undefined;
    const s = this.ctrl.state;
    const image = s.kind === "ready" ? s.status.image : this.loaded?.config.image;
    return {
      systemPrompt: `${prompt}

# Sandbox
Your tools (bash, read, write, edit, ls, find, grep) run inside a Linux microVM (krunbox sandbox ${this.ctrl.name}, image ${image ?? "?"}), not on the user's machine. ${this.loaded?.config.workspace === "isolated" ? `The project directory ${this.workspace} is, at the same path in the VM, this session's own git checkout of the project's HEAD (branch krunbox/${this.ctrl.name}): commit there as you like; the user reviews and lands your work with /krunbox diff and /krunbox land.` : `The project directory ${this.workspace} is mounted at the same path in the VM, so paths in it are the same as on the host and changes to them reach the host at once.`} Everything outside it (/root, /tmp, /usr, ...) belongs to the VM only. The host's environment variables and programs are not available; install what you need inside the VM.`,
    };
  }

  // ---- /krunbox ----

  private async command(args: string, ctx: ExtensionContext): Promise<void> {
    this.ctx = ctx;
    const [sub = "status"] = args.split(/\s+/).filter(Boolean);
    switch (sub) {
      case "status":
        return this.say(await this.describeStatus());
      case "config":
        return this.say(this.loaded ? describeConfig(this.loaded) : `krunbox: no configuration loaded: ${this.setupError ?? "session not started"}`);
      case "off":
        this.hostReason = "/krunbox off";
        this.refresh();
        return this.say("krunbox: OFF. Tools now run on the HOST, each call labelled. /krunbox on to go back to the sandbox.", "warning");
      case "on":
        return this.turnOn(ctx);
      case "restart":
        return this.restart(ctx);
      case "logs":
        return this.say(await this.logs());
      case "network":
        return this.network(args.split(/\s+/).filter(Boolean).slice(1));
      case "diff":
      case "export":
      case "land":
      case "workspaces":
        return this.isolated(sub, args.split(/\s+/).filter(Boolean).slice(1), ctx);
      default:
        return this.say(`krunbox: unknown subcommand "${sub}". Use: /krunbox status | on | off | restart | logs | config | network allow|deny RULE... | diff | export | land | workspaces`, "error");
    }
  }

  private async isolated(sub: string, words: string[], ctx: ExtensionContext): Promise<void> {
    if (this.loaded?.config.workspace !== "isolated" || !this.ctrl || !this.binary) {
      return this.say(`krunbox: /krunbox ${sub} is for isolated workspaces (workspace = "isolated" or KRUNBOX_PI_WORKSPACE=isolated); this session's workspace is ${this.workspace || "not set up"} itself`, "error");
    }
    const ui = ctx.hasUI ? (ctx.ui as { confirm?: (title: string, message: string) => Promise<boolean> }) : undefined;
    await isolatedCommand(
      {
        bin: this.binary.path,
        env: this.env,
        workspace: this.workspace,
        name: this.ctrl.name,
        cwd: ctx.cwd,
        confirm: typeof ui?.confirm === "function" ? (t, m) => (ui.confirm as (t: string, m: string) => Promise<boolean>)(t, m) : undefined,
        say: this.say,
      },
      sub,
      words,
    );
  }

  private async turnOn(ctx: ExtensionContext): Promise<void> {
    this.hostReason = undefined;
    this.workspace ||= findWorkspace(ctx.cwd);
    this.setupError = refusedWorkspace(this.workspace, this.env);
    if (this.setupError || !this.loadSettings(ctx)) {
      this.refresh();
      return this.say(`krunbox: cannot turn on: ${this.setupError}`, "error");
    }
    this.startSandbox();
    await this.sandbox().waitReady(ctx.signal).catch(() => {});
    this.say(this.statusText(), this.ctrl?.state.kind === "ready" ? "info" : "error");
  }

  private async restart(ctx: ExtensionContext): Promise<void> {
    this.workspace ||= findWorkspace(ctx.cwd);
    this.setupError = refusedWorkspace(this.workspace, this.env);
    if (this.setupError || !this.loadSettings(ctx)) {
      this.refresh();
      return this.say(`krunbox: cannot restart: ${this.setupError}`, "error");
    }
    if (!this.ctrl) this.startSandbox();
    const ctrl = this.sandbox();
    ctrl.setConfig((this.loaded as LoadedConfig).config, (this.loaded as LoadedConfig).imageTrusted);
    this.lastNotified = undefined;
    this.say("krunbox: restarting the sandbox with the current configuration…");
    await ctrl.restart();
    if (ctrl.state.kind === "ready" && this.hostReason?.startsWith("fallback")) this.hostReason = undefined;
    this.refresh();
    this.say(this.statusText(), ctrl.state.kind === "ready" ? "info" : "error");
  }

  private async describeStatus(): Promise<string> {
    const lines = [this.statusText()];
    if (this.workspace) lines.push(`workspace: ${this.workspace}`);
    if (this.ctrl) lines.push(`sandbox: ${this.ctrl.name}`);
    if (this.binary) lines.push(`krunbox: ${describeBinary(this.binary)}`);
    const conn = this.ctrl?.connection;
    if (conn?.info) lines.push(`server: ${conn.info.server.name} ${conn.info.server.version}, protocol ${conn.info.protocolVersion}`);
    const s = this.ctrl?.state;
    if (s?.kind === "ready" && s.status.bootMs !== undefined) lines.push(`boot: ${s.status.bootMs} ms`);
    if ((s?.kind === "failed" || s?.kind === "unresponsive") && s.hint) lines.push(`hint: ${s.hint}`);
    if (conn && !conn.closed && this.ctrl) {
      try {
        const st = await conn.request<{ state: string }>(
          "sandbox.status",
          { name: this.ctrl.name, timeoutMs: agentPingMs(this.ctrl.healthTimeoutMs) },
          { timeoutMs: this.ctrl.healthTimeoutMs },
        );
        lines.push(`server says: ${st.state}`);
      } catch (err) {
        lines.push(`server says: ${(err as Error).message}`);
      }
    }
    return lines.join("\n");
  }

  /** /krunbox network allow|deny RULE...: change the rules of the running sandbox (network allow=...). */
  private async network(args: string[]): Promise<void> {
    const [op, ...rules] = args;
    if ((op !== "allow" && op !== "deny") || rules.length === 0) {
      return this.say("krunbox: usage: /krunbox network allow|deny RULE... (a host name, *.domain, an IP or a CIDR, each optionally :PORT)", "error");
    }
    const conn = this.ctrl?.connection;
    if (!conn || conn.closed || !this.ctrl) return this.say("krunbox: network: the sandbox is not running", "error");
    try {
      const r = await conn.request<{ network: string }>(
        "sandbox.network",
        { name: this.ctrl.name, op, rules },
        { timeoutMs: this.ctrl.healthTimeoutMs },
      );
      return this.say(`krunbox: network is now ${r.network}`);
    } catch (err) {
      return this.say(`krunbox: network ${op}: ${(err as Error).message}`, "error");
    }
  }

  private async logs(): Promise<string> {
    const out: string[] = [];
    const conn = this.ctrl?.connection;
    if (conn && !conn.closed && this.ctrl) {
      try {
        const r = await conn.request<{ text: string; truncated: boolean }>(
          "sandbox.logs",
          { name: this.ctrl.name, maxBytes: 16384 },
          { timeoutMs: this.ctrl.healthTimeoutMs },
        );
        out.push(`--- console of ${this.ctrl.name}${r.truncated ? " (tail)" : ""} ---`, r.text.trimEnd() || "(empty)");
      } catch (err) {
        out.push(`console: ${(err as Error).message}`);
      }
    }
    const stderr = conn?.stderr.trim();
    out.push("--- krunbox serve log (tail) ---", stderr ? stderr.split("\n").slice(-40).join("\n") : "(empty)");
    return out.join("\n");
  }
}

/** What pi 0.73's rpc mode does with the client's `bash` command, said once per session. */
export const RPC_BASH_WARNING =
  "krunbox: pi 0.73 in rpc mode runs the rpc client's `bash` commands (an editor's !cmd) on the HOST, outside the sandbox: it does not let extensions see them. The agent's tools are sandboxed. Upgrade to pi 1.x (@earendil-works/pi-coding-agent) to sandbox those commands too.";

/**
 * Whether pi runs the rpc client's `bash` command without asking extensions: pi 0.73 (no
 * ctx.mode, no ctx.isProjectTrusted(), both of 1.x) started with --mode rpc. pi 1.x emits
 * user_bash for it, which the extension routes.
 */
export function rpcBashBypasses(ctx: object, argv: string[]): boolean {
  const c = ctx as { mode?: unknown; isProjectTrusted?: unknown };
  if (typeof c.mode === "string" || typeof c.isProjectTrusted === "function") return false;
  return argv.some((a, i) => a === "--mode=rpc" || (a === "--mode" && argv[i + 1] === "rpc"));
}

/** pi's own definitions of the routed tools, running on the host. */
const HOST_DEFINITIONS: Record<RoutedTool, (cwd: string) => AnyDefinition> = {
  bash: createBashToolDefinition,
  read: createReadToolDefinition,
  write: createWriteToolDefinition,
  edit: createEditToolDefinition,
  ls: createLsToolDefinition,
  find: createFindToolDefinition,
  grep: createGrepToolDefinition,
};

/** Resolve a tool's path argument as pi does (a leading @ dropped, ~ the host home). */
export function resolveToCwd(p: string, cwd: string): string {
  let s = p.startsWith("@") ? p.slice(1) : p;
  if (s === "~") s = os.homedir();
  else if (s.startsWith("~/")) s = os.homedir() + s.slice(1);
  return path.resolve(cwd, s);
}

/** The extension's entry point. */
export default function krunbox(pi: ExtensionAPI, opts?: ExtensionOptions): void {
  new KrunboxExtension(pi, opts).register();
}
