// The per-project sandbox as the extension sees it: one `krunbox serve` connection, the
// sandbox's state, and waiting for it to be ready. It never throws out of start(): a
// sandbox that cannot start becomes the "failed" state, which blocks every routed tool.
// A call that gets no answer in time (call_timeout_sec) makes it check the sandbox's
// health (sandbox.status, health_timeout_sec): a server or VM that does not answer becomes
// the "unresponsive" state, which blocks every routed tool too until it answers again or
// is restarted.

import { type KrunboxConfig, secretSource } from "./config.ts";
import { ClientErrorCode, ErrorCode, RpcError, type SandboxConfig, type SandboxStatus } from "./protocol.ts";
import { formatMs, type ServeClient } from "./rpc.ts";

/** Where the extension stands. */
export type State =
  | { kind: "idle" }
  | { kind: "starting"; progress?: string }
  | { kind: "ready"; status: SandboxStatus }
  | { kind: "stopped"; reason: string }
  | { kind: "unresponsive"; reason: string; hint: string }
  | { kind: "failed"; reason: string; hint?: string };

/** Programs found in the guest by the probe after start. */
export interface GuestTools {
  shell?: string;
  bash?: string;
  rg?: string;
  find?: string;
  grep?: string;
  xargs?: string;
}

/** What a ready sandbox offers to the tools. */
export interface Ready {
  client: ServeClient;
  name: string;
  status: SandboxStatus;
  tools: GuestTools;
  /** The deadline of one file call, or of the start of a command (call_timeout_sec). */
  callTimeoutMs: number;
  /**
   * After a call got no answer in time (late says which, and how long it waited): check
   * the sandbox's health, which marks it unresponsive when it does not answer, and return
   * the error to throw.
   */
  timedOut(late: string): Promise<Error>;
}

/** Inputs of a SandboxController. */
export interface SandboxOptions {
  name: string;
  workspace: string;
  config: KrunboxConfig;
  /** Whether config.image comes from the user (LoadedConfig.imageTrusted). */
  imageTrusted: boolean;
  /** Start a server and initialize it. */
  connect: () => Promise<ServeClient>;
}

/** The reason of an error, for the user. */
export function describeError(err: unknown): { reason: string; hint?: string } {
  if (err instanceof RpcError) {
    let hint = err.hint;
    if (err.code === ErrorCode.ConfigMismatch) {
      hint = `the sandbox was created with another ${(err.data?.keys ?? []).join(", ")}; /krunbox restart recreates it with the current configuration (its own files outside the workspace are lost)`;
    }
    if (err.code === ErrorCode.MethodNotFound || (err.code === ClientErrorCode.ServerExited && /unknown command "serve"/.test(err.message))) {
      hint = "this krunbox is older than pi-krunbox expects; install a matching krunbox, or point KRUNBOX_BIN at one";
    }
    return { reason: err.message, hint };
  }
  return { reason: err instanceof Error ? err.message : String(err) };
}

/** Translate the extension's configuration into sandbox.ensure's. */
export function sandboxConfig(config: KrunboxConfig, workspace: string, imageTrusted: boolean): SandboxConfig {
  return {
    image: config.image,
    imageTrusted,
    pull: config.pull,
    cpus: config.cpus,
    memoryMiB: config.memory_mib,
    network: config.network,
    mounts: config.mounts.map((m) => ({ host: m.host, guest: m.guest ?? m.host, readOnly: m.read_only })),
    env: config.env,
    idleTimeoutSec: config.idle_timeout_sec,
    labels: { "krunbox.pi.workspace": workspace },
    ...(config.secrets.length ? { secrets: config.secrets.map((sec) => ({ name: sec.env, source: secretSource(sec.value), hosts: sec.allow_hosts })) } : {}),
    ...(config.workspace === "isolated" ? { isolate: true } : {}),
  };
}

const PROBE = "for t in bash rg find grep xargs; do command -v $t || true; done";

/** How long an unresponsive sandbox waits between health checks. */
const RECHECK_MS = 1000;

const SERVER_HINT = "/krunbox restart starts a new krunbox serve and restarts the sandbox; /krunbox logs shows its log";
const VM_HINT = "/krunbox restart restarts the sandbox (the project's files are kept); /krunbox logs shows its console and krunbox's log";

/** One project's sandbox, through one krunbox serve connection at a time. */
export class SandboxController {
  readonly name: string;
  readonly workspace: string;
  private config: KrunboxConfig;
  private imageTrusted: boolean;
  private readonly connect: () => Promise<ServeClient>;
  private current: State = { kind: "idle" };
  private client: ServeClient | undefined;
  private tools: GuestTools = {};
  private starting: Promise<void> | undefined;
  private readonly listeners = new Set<(s: State) => void>();
  private disposed = false;
  /** The health check in flight. */
  private health: Promise<void> | undefined;
  /** Whether the unresponsive one is the server itself (then a restart needs a new one). */
  private serverStuck = false;
  private recovering = false;
  /** The status of the last start, kept through unresponsive spells. */
  private lastReady: SandboxStatus | undefined;

  constructor(opts: SandboxOptions) {
    this.name = opts.name;
    this.workspace = opts.workspace;
    this.config = opts.config;
    this.imageTrusted = opts.imageTrusted;
    this.connect = opts.connect;
  }

  /** The current state. */
  get state(): State {
    return this.current;
  }

  /** The server connection, when there is one (for logs and status). */
  get connection(): ServeClient | undefined {
    return this.client;
  }

  /** The deadline of one file call, or of the start of a command. */
  get callTimeoutMs(): number {
    return this.config.call_timeout_sec * 1000;
  }

  /** The deadline of a health check, and of the requests of /krunbox status and logs. */
  get healthTimeoutMs(): number {
    return this.config.health_timeout_sec * 1000;
  }

  /** Use another configuration from the next start on. */
  setConfig(config: KrunboxConfig, imageTrusted: boolean): void {
    this.config = config;
    this.imageTrusted = imageTrusted;
  }

  /** Call fn on every state change; returns the unsubscribe function. */
  onChange(fn: (s: State) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private set(s: State): void {
    this.current = s;
    for (const fn of this.listeners) fn(s);
    if (s.kind === "unresponsive") this.watchRecovery();
  }

  /**
   * Start (or reuse) the sandbox in the background. Never throws. An unresponsive one is
   * left to recover, or to restart().
   */
  start(): Promise<void> {
    if (this.starting) return this.starting;
    if (running(this.current)) return Promise.resolve();
    this.starting = this.bringUp("sandbox.ensure").finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  /** Stop the sandbox if it runs, recreate it from the current configuration, start it. Never throws. */
  restart(): Promise<void> {
    const run = async () => {
      await this.starting;
      const stuck = this.serverStuck ? this.client : undefined;
      if (stuck) {
        // It does not answer: a new server it is (closing one that does not read its stdin kills it).
        this.client = undefined;
        await stuck.close(500);
      }
      await this.bringUp("sandbox.restart");
    };
    this.starting = run().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async bringUp(method: "sandbox.ensure" | "sandbox.restart"): Promise<void> {
    this.set({ kind: "starting" });
    try {
      const client = await this.ensureClient();
      const params = {
        name: this.name,
        workspace: this.workspace,
        config: sandboxConfig(this.config, this.workspace, this.imageTrusted),
        startTimeoutMs: this.config.start_timeout_sec * 1000,
        ...(method === "sandbox.restart" ? { recreate: true } : {}),
      };
      const status = await client.request<SandboxStatus>(method, params);
      this.tools = await this.probe(client);
      if (this.disposed) return;
      this.serverStuck = false;
      this.lastReady = status;
      this.set({ kind: "ready", status });
    } catch (err) {
      if (this.disposed) return;
      this.set({ kind: "failed", ...describeError(err) });
    }
  }

  private async ensureClient(): Promise<ServeClient> {
    if (this.client && !this.client.closed) return this.client;
    const client = await this.connect();
    if (this.disposed) {
      // The session ended while the server started: nobody else will close it.
      await client.close();
      throw new Error("the session ended");
    }
    this.client = client;
    client.on("sandbox.progress", (p) => {
      const { name, message } = p as { name: string; message: string };
      if (name === this.name && this.current.kind === "starting") this.set({ kind: "starting", progress: message });
    });
    client.on("sandbox.state", (p) => {
      const { name, status } = p as { name: string; status: SandboxStatus };
      if (name !== this.name || !running(this.current) || status.state === "ready") return;
      this.set({ kind: "stopped", reason: status.reason ?? `sandbox ${status.state}` });
    });
    client.onClose((err) => {
      if (this.client !== client) return;
      this.client = undefined;
      if (!this.disposed && running(this.current)) this.set({ kind: "stopped", reason: err.message });
    });
    return client;
  }

  private async probe(client: ServeClient): Promise<GuestTools> {
    const tools: GuestTools = {};
    let out = "";
    try {
      const exit = await client.exec(
        { sandbox: this.name, argv: ["/bin/sh", "-c", PROBE], cwd: "/" },
        { onOutput: (stream, d) => stream === "stdout" && (out += d.toString()), startTimeoutMs: this.callTimeoutMs },
      );
      if (exit.exitCode === 0) tools.shell = "/bin/sh";
    } catch (err) {
      // A server that does not answer fails the start; it is not an image without a shell.
      if (err instanceof RpcError && err.code === ClientErrorCode.Timeout) throw err;
      // No /bin/sh: bash, find and grep will say so when used.
    }
    // `command -v` prints a path, or the bare name for a shell builtin: busybox's sh
    // (Debian's, say) runs its own applets that way, found again on the guest PATH.
    for (const line of out.split("\n")) {
      const p = line.trim();
      const base = p.slice(p.lastIndexOf("/") + 1) as keyof GuestTools;
      if ((p.startsWith("/") || p === base) && ["bash", "rg", "find", "grep", "xargs"].includes(base)) tools[base] ??= p;
    }
    return tools;
  }

  /**
   * Wait until the sandbox is ready, starting it again when it stopped (idle timeout, server
   * exit). Returns the ready sandbox, or throws an Error whose message says why it is not
   * (the caller blocks the tool with it).
   */
  async waitReady(signal?: AbortSignal, timeoutMs = this.config.start_timeout_sec * 1000): Promise<Ready> {
    if (this.current.kind === "stopped" || this.current.kind === "idle") void this.start();
    if (this.current.kind === "starting" && this.starting) {
      let timer: NodeJS.Timeout | undefined;
      let onAbort: (() => void) | undefined;
      try {
        await Promise.race([
          this.starting,
          new Promise<void>((resolve) => {
            timer = setTimeout(resolve, timeoutMs);
            onAbort = resolve;
            signal?.addEventListener("abort", onAbort, { once: true });
          }),
        ]);
      } finally {
        clearTimeout(timer);
        if (onAbort) signal?.removeEventListener("abort", onAbort);
      }
    }
    return this.ready();
  }

  /** The ready sandbox now, or throw saying why it is not ready. */
  ready(): Ready {
    const s = this.current;
    if (s.kind === "ready" && this.client && !this.client.closed) {
      return {
        client: this.client,
        name: this.name,
        status: s.status,
        tools: this.tools,
        callTimeoutMs: this.callTimeoutMs,
        timedOut: (what) => this.callTimedOut(what),
      };
    }
    throw new NotReadyError(this.current);
  }

  /** Stop the sandbox (sandbox.stop). */
  async stop(): Promise<void> {
    const client = await this.ensureClient();
    await client.request("sandbox.stop", { name: this.name }, { timeoutMs: this.healthTimeoutMs });
    this.set({ kind: "stopped", reason: "stopped by /krunbox" });
  }

  private async callTimedOut(late: string): Promise<Error> {
    await this.checkHealth(late);
    if (this.current.kind === "ready") {
      return new Error(`krunbox: ${late}, though the sandbox answers a health check: try again, or raise call_timeout_sec`);
    }
    return new Error(`krunbox: ${new NotReadyError(this.current).message}`);
  }

  /**
   * Ask the server how the sandbox is (sandbox.status: the server pings the guest agent),
   * with the health deadline, and update the state: unresponsive when the server or the VM
   * does not answer, ready again when both do, stopped when the VM is gone. One check runs
   * at a time; why says what made it (for the reason shown). Never throws.
   */
  checkHealth(why?: string): Promise<void> {
    this.health ??= this.runHealthCheck(why).finally(() => {
      this.health = undefined;
    });
    return this.health;
  }

  private async runHealthCheck(why: string | undefined): Promise<void> {
    const client = this.client;
    if (!client || client.closed || !running(this.current)) return;
    const ms = this.healthTimeoutMs;
    let status: SandboxStatus;
    try {
      // The server's ping of the agent gets half the deadline, so that a frozen VM is
      // reported as such by a server that still answers.
      status = await client.request<SandboxStatus>("sandbox.status", { name: this.name, timeoutMs: agentPingMs(ms) }, { timeoutMs: ms });
    } catch (err) {
      const stale = this.client !== client || this.disposed || !running(this.current);
      if (stale || !(err instanceof RpcError) || err.code !== ClientErrorCode.Timeout) return; // a dead server: onClose says so
      if (this.current.kind === "unresponsive" && this.serverStuck) return;
      this.serverStuck = true;
      const reason = `krunbox serve (pid ${client.pid}) does not answer: ${why ? `${why}, nor did ` : ""}a health check within ${formatMs(ms)}`;
      this.set({ kind: "unresponsive", reason, hint: SERVER_HINT });
      return;
    }
    if (this.client !== client || this.disposed || !running(this.current)) return;
    this.serverStuck = false;
    const cur = this.current;
    switch (status.state) {
      case "ready":
        if (cur.kind === "unresponsive") this.set({ kind: "ready", status: { ...this.lastReady, ...status } });
        return;
      case "unresponsive": {
        const reason = `the VM does not answer: ${status.reason ?? "its agent does not answer a ping"}`;
        if (cur.kind !== "unresponsive" || cur.reason !== reason) this.set({ kind: "unresponsive", reason, hint: VM_HINT });
        return;
      }
      default:
        this.set({ kind: "stopped", reason: status.reason ?? `sandbox ${status.state}` });
    }
  }

  /** While unresponsive, check the health again and again: it may answer again. */
  private watchRecovery(): void {
    if (this.recovering) return;
    this.recovering = true;
    const loop = async () => {
      try {
        while (!this.disposed && this.current.kind === "unresponsive") {
          await new Promise((resolve) => setTimeout(resolve, RECHECK_MS).unref());
          if (this.disposed || this.current.kind !== "unresponsive") break;
          await this.checkHealth();
        }
      } finally {
        this.recovering = false;
      }
    };
    void loop();
  }

  /** Close the server connection (the sandbox keeps running unless stop_on_exit). */
  async dispose(): Promise<void> {
    this.disposed = true;
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    if (this.config.stop_on_exit && this.current.kind === "ready") {
      await client.request("sandbox.stop", { name: this.name }, { timeoutMs: this.healthTimeoutMs }).catch(() => {});
    }
    await client.close();
  }
}

/** Thrown by ready() and waitReady(); the message is what the user and the model see. */
export class NotReadyError extends Error {
  readonly state: State;
  constructor(state: State) {
    super(notReadyReason(state));
    this.name = "NotReadyError";
    this.state = state;
  }
}

function notReadyReason(s: State): string {
  switch (s.kind) {
    case "starting":
      return `the sandbox is still starting${s.progress ? ` (${s.progress})` : ""}`;
    case "failed":
      return `the sandbox could not start: ${s.reason}${s.hint ? ` (${s.hint})` : ""}`;
    case "stopped":
      return `the sandbox stopped: ${s.reason}`;
    case "unresponsive":
      return `the sandbox is unresponsive: ${s.reason} (${s.hint}; it is used again as soon as it answers)`;
    case "idle":
      return "the sandbox was not started";
    case "ready":
      return "the connection to krunbox serve is closed";
  }
}

/** Whether the sandbox was up (ready, or up but not answering). */
function running(s: State): boolean {
  return s.kind === "ready" || s.kind === "unresponsive";
}

/** The part of a health deadline the server may spend pinging the guest agent. */
export function agentPingMs(healthTimeoutMs: number): number {
  return Math.max(100, Math.floor(healthTimeoutMs / 2));
}
