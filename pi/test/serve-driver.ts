// Helpers to run a `krunbox serve --stdio` server under test: the stand-in by default, or
// any krunbox named by KRUNBOX_SERVE_BIN (phase 2: build/krunbox on the libkrun test
// double, with KRUNBOX_SERVE_ENV='{"KRUNBOX_LIBKRUN": "..."}' and KRUNBOX_SERVE_IMAGE).

import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { RpcError } from "../src/protocol.ts";
import { ServeClient, type ServeCommand } from "../src/rpc.ts";

const here = path.dirname(fileURLToPath(import.meta.url));

/** The stand-in krunbox. */
export const STANDIN = path.join(here, "standin", "krunbox");

/** The server binary under test. */
export const SERVE_BIN = process.env.KRUNBOX_SERVE_BIN ? path.resolve(process.env.KRUNBOX_SERVE_BIN) : STANDIN;

/** Whether the server under test is the stand-in (which runs commands on the host). */
export const IS_STANDIN = SERVE_BIN === STANDIN;

/** The image sandboxes are created from. */
export const IMAGE = process.env.KRUNBOX_SERVE_IMAGE ?? "standin.invalid/busybox:latest";

/** A temporary KRUNBOX_HOME and workspace, and the server command using them. */
export class ServeEnv {
  readonly root: string;
  readonly home: string;
  readonly workspace: string;
  readonly env: NodeJS.ProcessEnv;

  constructor(extraEnv: NodeJS.ProcessEnv = {}) {
    this.root = realpathSync(mkdtempSync(path.join(tmpdir(), "krunbox-serve-")));
    this.home = path.join(this.root, "home");
    this.workspace = path.join(this.root, "ws");
    mkdirSync(this.home, { recursive: true });
    mkdirSync(this.workspace, { recursive: true });
    const fromEnv = process.env.KRUNBOX_SERVE_ENV ? (JSON.parse(process.env.KRUNBOX_SERVE_ENV) as NodeJS.ProcessEnv) : {};
    this.env = { PATH: process.env.PATH, HOME: process.env.HOME, KRUNBOX_HOME: this.home, ...fromEnv, ...extraEnv };
  }

  command(): ServeCommand {
    return { bin: SERVE_BIN, env: this.env, cwd: this.root };
  }

  connect(): Promise<ServeClient> {
    return ServeClient.connect(this.command(), { name: "test", version: "0" });
  }

  /** A sandbox name unique to this environment. */
  name(suffix = "t"): string {
    return `t-${path.basename(this.root).replace(/[^a-z0-9]/gi, "").toLowerCase().slice(-10)}-${suffix}`;
  }

  ensureParams(name: string, config: object = {}): object {
    return { name, workspace: this.workspace, config: { image: IMAGE, imageTrusted: true, ...config } };
  }

  /** Remove the sandboxes (a real server's VMs outlive it) and the directories. */
  async cleanup(): Promise<void> {
    await removeSandboxes(this.command(), this.home);
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** A server driven with raw lines, for malformed input and exact message order. */
export class RawServer {
  readonly messages: Record<string, unknown>[] = [];
  private readonly child: ChildProcess;
  private buf = "";
  private waiters: (() => void)[] = [];
  readonly exited: Promise<number | null>;

  constructor(cmd: ServeCommand) {
    this.child = spawn(cmd.bin, cmd.args ?? ["serve", "--stdio"], { env: cmd.env, cwd: cmd.cwd, stdio: ["pipe", "pipe", "ignore"] });
    this.child.stdout?.setEncoding("utf8");
    this.child.stdout?.on("data", (d: string) => {
      this.buf += d;
      const lines = this.buf.split("\n");
      this.buf = lines.pop() ?? "";
      for (const l of lines) if (l.trim()) this.messages.push(JSON.parse(l));
      for (const w of this.waiters.splice(0)) w();
    });
    this.exited = new Promise((resolve) => this.child.on("close", (code) => resolve(code)));
  }

  write(line: string): void {
    this.child.stdin?.write(line.endsWith("\n") ? line : `${line}\n`);
  }

  send(id: number | string, method: string, params: object = {}): void {
    this.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  }

  /** Wait until pred matches a message; returns it. */
  async waitFor(pred: (m: Record<string, unknown>) => boolean, what: string, timeoutMs = 20_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.messages.find(pred);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.messages.slice(-5))}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
  }

  response(id: number | string, timeoutMs?: number): Promise<Record<string, unknown>> {
    return this.waitFor((m) => m.id === id && ("result" in m || "error" in m), `response ${id}`, timeoutMs);
  }

  end(): void {
    this.child.stdin?.end();
  }

  kill(): void {
    this.child.kill("SIGKILL");
  }
}

/** Poll cond until it is true or the deadline passes. */
export async function eventually(cond: () => Promise<boolean> | boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 10; ; delay = Math.min(delay * 2, 200)) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, delay));
  }
}

/** Whether every thread of pid is stopped (state T in /proc/PID/task/TID/stat). */
function allThreadsStopped(pid: number): boolean {
  try {
    const tasks = readdirSync(`/proc/${pid}/task`);
    return tasks.length > 0 && tasks.every((t) => {
      const stat = readFileSync(`/proc/${pid}/task/${t}/stat`, "utf8");
      return stat.slice(stat.lastIndexOf(")") + 2).startsWith("T");
    });
  } catch {
    return false;
  }
}

/**
 * SIGSTOP each process, then wait until all their threads have stopped: kill returns before
 * a group stop completes, and a thread still running may answer (or start a command)
 * meanwhile. Processes already gone are skipped.
 */
export async function stopProcesses(pids: number[]): Promise<void> {
  const stopped: number[] = [];
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGSTOP");
      stopped.push(pid);
    } catch {
      // gone
    }
  }
  await eventually(() => stopped.every(allThreadsStopped), `processes ${stopped.join(", ")} to stop`);
}

/**
 * Stop and remove every sandbox of a KRUNBOX_HOME (krunbox keeps them in state/sandboxes/)
 * through a fresh connection. Real servers keep sandboxes (VMs) running after a session
 * ends, so tests using one clean up this way; failures are reported on stderr.
 */
export async function removeSandboxes(cmd: ServeCommand, krunboxHome: string): Promise<void> {
  // A krunbox serve that pi left behind may still be creating or starting one.
  await waitForServers(krunboxHome);
  let names: string[];
  try {
    names = readdirSync(path.join(krunboxHome, "state", "sandboxes")).filter((n) => !n.startsWith("."));
  } catch {
    return; // none (or the stand-in, which keeps its own)
  }
  if (names.length === 0) return;
  const warn = (err: unknown) => process.stderr.write(`test cleanup: removing the sandboxes of ${krunboxHome}: ${err instanceof Error ? err.message : String(err)}\n`);
  try {
    const c = await ServeClient.connect(cmd, { name: "test-cleanup", version: "0" });
    try {
      for (const name of names) await c.request("sandbox.stop", { name, remove: true }).catch(warn);
    } finally {
      await c.close();
    }
  } catch (err) {
    warn(err);
  }
}

/** The pids of the `krunbox serve --stdio` processes with this KRUNBOX_HOME (Linux: /proc; elsewhere none). */
export function serveProcesses(krunboxHome: string): number[] {
  const marker = `\0KRUNBOX_HOME=${krunboxHome}\0`;
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((p) => /^\d+$/.test(p));
  } catch {
    return [];
  }
  return pids
    .filter((pid) => {
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, "latin1");
        return argv.includes("\0serve\0--stdio") && `\0${readFileSync(`/proc/${pid}/environ`, "latin1")}`.includes(marker);
      } catch {
        return false; // gone, or not ours to read
      }
    })
    .map(Number);
}

/** Wait (at most 20 s) until no `krunbox serve --stdio` with this KRUNBOX_HOME runs. */
export async function waitForServers(krunboxHome: string): Promise<void> {
  await eventually(() => serveProcesses(krunboxHome).length === 0, `krunbox serve of ${krunboxHome} to exit`, 20_000).catch((err) =>
    process.stderr.write(`test cleanup: ${err.message}\n`),
  );
}

/** The RpcError p rejects with; fails the test when p resolves or rejects otherwise. */
export async function rpcRejection(p: Promise<unknown>): Promise<RpcError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof RpcError) return err;
    throw err;
  }
  throw new Error("expected a rejection with an RpcError");
}

/** Run fn with a fresh server environment and connection, cleaned up afterwards. */
export async function withServer<T>(extraEnv: NodeJS.ProcessEnv, fn: (c: ServeClient, env: ServeEnv) => Promise<T>): Promise<T> {
  const env = new ServeEnv(extraEnv);
  try {
    const c = await env.connect();
    try {
      return await fn(c, env);
    } finally {
      await c.close();
    }
  } finally {
    await env.cleanup();
  }
}
