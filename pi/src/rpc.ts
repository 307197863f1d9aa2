// The client side of `krunbox serve --stdio` (docs/serve-protocol.md): one child process,
// JSON-RPC 2.0 over newline-delimited JSON, requests answered concurrently, exec output
// streamed as notifications.

import { type ChildProcess, spawn } from "node:child_process";
import {
  ClientErrorCode,
  type ExecExitParams,
  type ExecOutputParams,
  type ExecStartParams,
  type ExecStartResult,
  type InitializeResult,
  type OutputStream,
  PROTOCOL_VERSION,
  RpcError,
} from "./protocol.ts";

/** How to start the server. */
export interface ServeCommand {
  /** Path of the krunbox executable (or a stand-in). */
  bin: string;
  /** Arguments; default ["serve", "--stdio"]. */
  args?: string[];
  /** Environment of the server process; default: this process's. */
  env?: NodeJS.ProcessEnv;
  /** Working directory of the server process. */
  cwd?: string;
}

type NotificationHandler = (params: unknown) => void;

interface Pending {
  method: string;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

/** Options of ServeClient.request. */
export interface RequestOptions {
  /** Aborting rejects the request at once (RpcError Aborted). */
  signal?: AbortSignal;
  /** Reject with RpcError Timeout when no answer came within this long. */
  timeoutMs?: number;
  /**
   * Receives the result of a request that was given up on (aborted or timed out) and that
   * the server carried out after all (a stopped server that resumes does).
   */
  onLate?: (result: unknown) => void;
}

interface RunningExec {
  onOutput: (stream: OutputStream, data: Buffer) => void;
  resolve: (exit: ExecExitParams) => void;
  reject: (err: Error) => void;
}

/** Options of ServeClient.exec. */
export interface ExecOptions {
  /** Receives each output chunk, in order. */
  onOutput?: (stream: OutputStream, data: Buffer) => void;
  /** Aborting kills the command's process group (SIGKILL); exec still resolves with its exit. */
  signal?: AbortSignal;
  /** Called with the exec's id once it started (for exec.signal). */
  onStart?: (execId: string) => void;
  /**
   * Deadline of exec.start's answer (not of the command). When it passes, exec rejects with
   * RpcError Timeout, and a command that the server starts after all is killed.
   */
  startTimeoutMs?: number;
}

const STDERR_KEEP = 64 * 1024;

/** A duration for messages: "1.5 s", "300 ms". */
export function formatMs(ms: number): string {
  return ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`;
}

/** A connection to one `krunbox serve --stdio` process. */
export class ServeClient {
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, Pending>();
  private readonly execs = new Map<string, RunningExec>();
  private readonly handlers = new Map<string, Set<NotificationHandler>>();
  private readonly closeHandlers = new Set<(err: RpcError) => void>();
  private nextId = 1;
  private nextExecId = 1;
  private parts: Buffer[] = [];
  private stderrText = "";
  private closedError: RpcError | undefined;
  private readonly exited: Promise<void>;
  /** The server's answer to initialize, once connect() succeeded. */
  info: InitializeResult | undefined;

  private constructor(cmd: ServeCommand) {
    this.child = spawn(cmd.bin, cmd.args ?? ["serve", "--stdio"], {
      env: cmd.env ?? process.env,
      cwd: cmd.cwd,
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.exited = new Promise((resolve) => {
      this.child.once("exit", () => resolve());
      this.child.once("close", (code, signal) => {
        const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
        this.shutDown(new RpcError(ClientErrorCode.ServerExited, `krunbox serve ${how}${this.lastStderrLine()}`));
        resolve();
      });
      this.child.once("error", (err) => {
        this.shutDown(new RpcError(ClientErrorCode.ServerExited, `cannot run ${cmd.bin}: ${err.message}`));
        resolve();
      });
    });
    this.child.stdout?.on("data", (chunk: Buffer) => this.onStdout(chunk));
    this.child.stderr?.setEncoding("utf8");
    this.child.stderr?.on("data", (text: string) => {
      this.stderrText = (this.stderrText + text).slice(-STDERR_KEEP);
    });
    this.child.stdin?.on("error", () => {
      // EPIPE when the server died: reported through "close".
    });
  }

  /**
   * Start the server and run the initialize handshake. Rejects with an RpcError when the
   * server cannot start, dies, speaks another protocol version, or does not answer within
   * timeoutMs.
   */
  static async connect(
    cmd: ServeCommand,
    client: { name: string; version: string },
    timeoutMs = 15_000,
  ): Promise<ServeClient> {
    const c = new ServeClient(cmd);
    try {
      const info = await c.request<InitializeResult>("initialize", { protocolVersion: PROTOCOL_VERSION, client }, { timeoutMs });
      if (info.protocolVersion !== PROTOCOL_VERSION) {
        throw new RpcError(
          ClientErrorCode.ServerExited,
          `krunbox serve answered protocol version ${info.protocolVersion}, this extension speaks ${PROTOCOL_VERSION}`,
        );
      }
      c.info = info;
      return c;
    } catch (err) {
      await c.close(500);
      throw err;
    }
  }

  /** The server's process id. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Whether the connection is closed (the server exited or close() was called). */
  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** The last bytes the server wrote to stderr (its log). */
  get stderr(): string {
    return this.stderrText;
  }

  /**
   * Send a request and wait for its answer. Server errors reject with RpcError; so do an
   * abort (Aborted) and a deadline passing (Timeout).
   */
  request<T>(method: string, params: object, opts: RequestOptions = {}): Promise<T> {
    const { signal, timeoutMs } = opts;
    if (this.closedError) return Promise.reject(this.closedError);
    if (signal?.aborted) return Promise.reject(new RpcError(ClientErrorCode.Aborted, `${method}: aborted`));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      const giveUp = (err: RpcError) => {
        settle();
        // Keep the id known so that a late answer reaches onLate (and nothing else).
        if (opts.onLate) this.pending.set(id, { method, resolve: opts.onLate, reject: () => {} });
        else this.pending.delete(id);
        reject(err);
      };
      const onAbort = () => giveUp(new RpcError(ClientErrorCode.Aborted, `${method}: aborted`));
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => giveUp(new RpcError(ClientErrorCode.Timeout, `krunbox serve did not answer ${method} within ${formatMs(timeoutMs)}`)), timeoutMs);
      }
      this.pending.set(id, {
        method,
        resolve: (v) => {
          settle();
          resolve(v as T);
        },
        reject: (e) => {
          settle();
          reject(e);
        },
      });
      this.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
    });
  }

  /** Subscribe to a server notification; returns the unsubscribe function. */
  on(method: string, handler: NotificationHandler): () => void {
    let set = this.handlers.get(method);
    if (!set) {
      set = new Set();
      this.handlers.set(method, set);
    }
    set.add(handler);
    return () => set.delete(handler);
  }

  /** Called once when the connection closes, with the reason. */
  onClose(handler: (err: RpcError) => void): () => void {
    if (this.closedError) {
      handler(this.closedError);
      return () => {};
    }
    this.closeHandlers.add(handler);
    return () => this.closeHandlers.delete(handler);
  }

  /**
   * Run a command (exec.start) and resolve with its exec.exit once it ended. Rejects with
   * RpcError when it could not start (1009 exec-failed, 1002 not-ready, ...) or when the
   * server went away.
   */
  async exec(params: Omit<ExecStartParams, "execId">, opts: ExecOptions = {}): Promise<ExecExitParams> {
    const execId = `x${this.nextExecId++}`;
    const exited = new Promise<ExecExitParams>((resolve, reject) => {
      this.execs.set(execId, { onOutput: opts.onOutput ?? (() => {}), resolve, reject });
    });
    exited.catch(() => {});
    const signalIt = () => this.request("exec.signal", { execId, signal: "SIGKILL" }).catch(() => {});
    try {
      await this.request<ExecStartResult>(
        "exec.start",
        { ...params, execId },
        // It started after exec gave up on it: nobody waits for its output, kill it.
        { signal: opts.signal, timeoutMs: opts.startTimeoutMs, onLate: () => void signalIt() },
      );
    } catch (err) {
      this.execs.delete(execId);
      throw err;
    }
    opts.onStart?.(execId);
    // With a start deadline, the end of a command that was killed, or that ran past its
    // timeout, is awaited that long again: a server or VM that stopped answering does not
    // hold the caller forever.
    const grace = opts.startTimeoutMs;
    let watchdog: NodeJS.Timeout | undefined;
    const expect = (ms: number, what: string) => {
      if (grace === undefined) return;
      clearTimeout(watchdog);
      watchdog = setTimeout(() => {
        const e = this.execs.get(execId);
        this.execs.delete(execId);
        e?.reject(new RpcError(ClientErrorCode.Timeout, `krunbox serve did not report the end of the command within ${formatMs(grace)} ${what}`));
      }, ms);
    };
    if (params.timeoutMs !== undefined) expect(params.timeoutMs + (grace ?? 0), "after its timeout");
    const kill = () => {
      void signalIt();
      expect(grace ?? 0, "after it was killed");
    };
    if (opts.signal?.aborted) kill();
    else opts.signal?.addEventListener("abort", kill, { once: true });
    try {
      return await exited;
    } finally {
      clearTimeout(watchdog);
      opts.signal?.removeEventListener("abort", kill);
    }
  }

  /**
   * Close stdin and wait for the server to exit; kill it when it does not within graceMs.
   * Pipes that a leftover grandchild still holds are let go.
   */
  async close(graceMs = 3000): Promise<void> {
    this.child.stdin?.end();
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const timer = setTimeout(() => this.child.kill("SIGKILL"), graceMs);
      await this.exited;
      clearTimeout(timer);
    }
    this.child.stdout?.destroy();
    this.child.stderr?.destroy();
    this.shutDown(new RpcError(ClientErrorCode.ServerExited, "connection to krunbox serve closed"));
  }

  /** The end of the server's log: its last line, or the last two when that is a hint. */
  private lastStderrLine(): string {
    const lines = this.stderrText.trim().split("\n").map((l) => l.trim()).filter(Boolean);
    const tail = lines.slice(lines[lines.length - 1]?.startsWith("hint:") ? -2 : -1);
    return tail.length ? `: ${tail.join("; ")}` : "";
  }

  private shutDown(err: RpcError): void {
    if (this.closedError) return;
    this.closedError = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    for (const e of this.execs.values()) e.reject(err);
    this.execs.clear();
    for (const h of this.closeHandlers) h(err);
    this.closeHandlers.clear();
  }

  private onStdout(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      if (nl < 0) break;
      const piece = chunk.subarray(start, nl);
      const line = this.parts.length ? Buffer.concat([...this.parts, piece]) : piece;
      this.parts = [];
      start = nl + 1;
      if (line.length) this.onLine(line.toString("utf8"));
    }
    if (start < chunk.length) this.parts.push(chunk.subarray(start));
  }

  private onLine(line: string): void {
    let msg: {
      id?: number | string | null;
      method?: string;
      params?: unknown;
      result?: unknown;
      error?: { code: number; message: string; data?: object };
    };
    try {
      msg = JSON.parse(line);
    } catch {
      this.stderrText = `${this.stderrText}krunbox serve wrote a line that is not JSON: ${line.slice(0, 200)}\n`.slice(-STDERR_KEEP);
      return;
    }
    if (msg.method !== undefined && msg.id === undefined) {
      this.onNotification(msg.method, msg.params);
      return;
    }
    if (typeof msg.id !== "number") return;
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.error) {
      p.reject(new RpcError(msg.error.code, msg.error.message, msg.error.data as RpcError["data"]));
    } else {
      p.resolve(msg.result);
    }
  }

  private onNotification(method: string, params: unknown): void {
    if (method === "exec.output") {
      const p = params as ExecOutputParams;
      this.execs.get(p.execId)?.onOutput(p.stream, Buffer.from(p.data, "base64"));
    } else if (method === "exec.exit") {
      const p = params as ExecExitParams;
      const e = this.execs.get(p.execId);
      if (e) {
        this.execs.delete(p.execId);
        e.resolve(p);
      }
    }
    for (const h of this.handlers.get(method) ?? []) {
      try {
        h(params);
      } catch {
        // A subscriber's bug must not break the connection.
      }
    }
  }
}
