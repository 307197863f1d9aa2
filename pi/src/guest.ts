// pi's pluggable tool operations, implemented in the sandbox through krunbox serve. Every
// operation fetches the ready sandbox when it runs and throws when there is none: a tool
// that slipped past the gate still cannot reach the host. File calls and the starts of
// commands have a deadline (Ready.callTimeoutMs); one that passes checks the sandbox's
// health, and the call fails saying whether it is unresponsive.

import { AsyncLocalStorage } from "node:async_hooks";
import * as path from "node:path";
import { Minimatch } from "minimatch";
import { ClientErrorCode, ErrorCode, type DirEntry, type FileType, RpcError, type ReadFileResult, type StatResult } from "./protocol.ts";
import { formatMs } from "./rpc.ts";
import type { Ready } from "./sandbox.ts";

// pi's file operations (readFile(path), ...) take no abort signal: the tool call's signal
// reaches them through the async context of its execute.
const callSignal = new AsyncLocalStorage<AbortSignal | undefined>();

/** Run fn (a tool's execute) with signal as the abort signal of the file calls it makes. */
export function withCallSignal<T>(signal: AbortSignal | undefined, fn: () => T): T {
  return callSignal.run(signal, fn);
}

/** Whether err is a request that got no answer in time. */
export function isTimeout(err: unknown): boolean {
  return err instanceof RpcError && err.code === ClientErrorCode.Timeout;
}

/** Returns the ready sandbox or throws why it is not ready. */
export type ReadyFn = () => Ready;

const ERRNO: Record<number, [string, string]> = {
  [ErrorCode.NotFound]: ["ENOENT", "no such file or directory"],
  [ErrorCode.NotDir]: ["ENOTDIR", "not a directory"],
  [ErrorCode.IsDir]: ["EISDIR", "illegal operation on a directory"],
  [ErrorCode.Permission]: ["EACCES", "permission denied"],
};

/**
 * Turn a server error into the kind of error node:fs throws (code ENOENT, ...), so pi's
 * tools word it as they do for local files; other errors say they come from krunbox.
 */
export function fsError(err: unknown, op: string, p: string): Error {
  if (err instanceof RpcError) {
    const errno = ERRNO[err.code];
    if (errno) return Object.assign(new Error(`${errno[0]}: ${errno[1]}, ${op} '${p}'`), { code: errno[0], path: p });
    return new Error(`krunbox: ${op} ${p}: ${err.message}`);
  }
  return err instanceof Error ? err : new Error(String(err));
}

/** File operations in the sandbox. */
export class GuestFS {
  constructor(private readonly ready: ReadyFn) {}

  private async call<T>(method: string, op: string, p: string, params: object = {}): Promise<T> {
    const r = this.ready();
    try {
      return await r.client.request<T>(method, { sandbox: r.name, path: p, ...params }, { signal: callSignal.getStore(), timeoutMs: r.callTimeoutMs });
    } catch (err) {
      if (isTimeout(err)) throw await r.timedOut(`${method} ${p} got no answer within ${formatMs(r.callTimeoutMs)}`);
      throw fsError(err, op, p);
    }
  }

  /** Up to length bytes at offset (the server's maximum when length is absent). */
  async readChunk(p: string, offset: number, length?: number): Promise<{ data: Buffer; eof: boolean }> {
    const r = await this.call<ReadFileResult>("fs.readFile", "open", p, { offset, ...(length === undefined ? {} : { length }) });
    return { data: Buffer.from(r.data, "base64"), eof: r.eof };
  }

  /** The whole file, read in chunks of the server's maximum; prefix is what was read already. */
  async readFile(p: string, prefix?: Buffer): Promise<Buffer> {
    const parts: Buffer[] = prefix ? [prefix] : [];
    let offset = prefix?.length ?? 0;
    for (;;) {
      const { data, eof } = await this.readChunk(p, offset);
      parts.push(data);
      offset += data.length;
      if (eof || data.length === 0) break;
    }
    return Buffer.concat(parts);
  }

  /** Write a file atomically; createParents makes missing directories. */
  async writeFile(p: string, content: string | Buffer, createParents = false): Promise<void> {
    const data = typeof content === "string" ? Buffer.from(content, "utf8") : content;
    await this.call("fs.writeFile", "open", p, { data: data.toString("base64"), mkdirs: createParents });
  }

  async stat(p: string, lstat = false): Promise<StatResult> {
    return this.call<StatResult>("fs.stat", lstat ? "lstat" : "stat", p, { lstat });
  }

  /** Whether p exists (following symlinks). */
  async exists(p: string): Promise<boolean> {
    try {
      await this.stat(p);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT" || (err as NodeJS.ErrnoException).code === "ENOTDIR") return false;
      throw err;
    }
  }

  async readDir(p: string): Promise<DirEntry[]> {
    return (await this.call<{ entries: DirEntry[] }>("fs.readDir", "scandir", p)).entries;
  }

  async mkdirAll(p: string): Promise<void> {
    await this.call("fs.mkdirAll", "mkdir", p);
  }
}

function statLike(type: FileType) {
  return { isDirectory: () => type === "dir", isFile: () => type === "file" };
}

/** How much of a file the first call of a read or an edit fetches: small files come whole. */
const HEAD_BYTES = 64 * 1024;
/** How long a fetched head waits for the readFile of the same tool call. */
const HEAD_TTL_MS = 2000;

/**
 * pi's read and edit tools call access(), then (read) detectImageMimeType(), then
 * readFile() on one path. FirstRead answers the three with one fs.readFile for files up
 * to HEAD_BYTES: access() fetches the head, and readFile() takes it (once) and reads on
 * from there for bigger files.
 */
export class FirstRead {
  private readonly heads = new Map<string, { data: Buffer; eof: boolean; at: number }>();

  constructor(private readonly fs: GuestFS) {}

  private async head(p: string) {
    const h = this.heads.get(p);
    if (h && Date.now() - h.at < HEAD_TTL_MS) return h;
    const fresh = { ...(await this.fs.readChunk(p, 0, HEAD_BYTES)), at: Date.now() };
    this.heads.set(p, fresh);
    return fresh;
  }

  /** Throws as fs.readFile would (ENOENT, EISDIR, EACCES) and keeps the head. */
  async access(p: string): Promise<void> {
    this.heads.delete(p);
    await this.head(p);
  }

  async detectImageMimeType(p: string): Promise<string | null> {
    return sniffImage((await this.head(p)).data.subarray(0, 16)) ?? null;
  }

  async readFile(p: string): Promise<Buffer> {
    const h = this.heads.get(p);
    this.heads.delete(p);
    if (!h || Date.now() - h.at >= HEAD_TTL_MS) return this.fs.readFile(p);
    return h.eof ? h.data : this.fs.readFile(p, h.data);
  }
}

/**
 * The ls tool stats every entry it lists. readdir keeps the types it got so those stats
 * need no round trip (symlinks are still stat'ed, to follow them).
 */
export class LsCache {
  private readonly types = new Map<string, FileType>();

  constructor(private readonly fs: GuestFS) {}

  async exists(p: string): Promise<boolean> {
    return this.fs.exists(p);
  }

  async stat(p: string): Promise<{ isDirectory(): boolean }> {
    const known = this.types.get(p);
    if (known !== undefined) {
      this.types.delete(p);
      if (known !== "symlink") return statLike(known);
    }
    return statLike((await this.fs.stat(p)).type);
  }

  async readdir(p: string): Promise<string[]> {
    const entries = await this.fs.readDir(p);
    for (const e of entries) this.types.set(path.posix.join(p, e.name), e.type);
    return entries.map((e) => e.name);
  }
}

/** Image types pi's read tool sends as images, by their first bytes. */
export function sniffImage(head: Buffer): string | undefined {
  if (head.length >= 8 && head.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) return "image/png";
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return "image/jpeg";
  if (head.length >= 6 && (head.toString("latin1", 0, 6) === "GIF87a" || head.toString("latin1", 0, 6) === "GIF89a")) return "image/gif";
  if (head.length >= 12 && head.toString("latin1", 0, 4) === "RIFF" && head.toString("latin1", 8, 12) === "WEBP") return "image/webp";
  return undefined;
}

/** Signal numbers for a 128+N exit code (Linux). */
const SIGNUM: Record<string, number> = {
  SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGBUS: 7, SIGFPE: 8, SIGKILL: 9,
  SIGUSR1: 10, SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15, SIGCHLD: 17, SIGCONT: 18,
  SIGSTOP: 19, SIGTSTP: 20, SIGTTIN: 21, SIGTTOU: 22, SIGXCPU: 24, SIGXFSZ: 25, SIGSYS: 31,
};

/** The exit code a shell would report for a process killed by signal. */
export function signalExitCode(signal: string): number {
  return 128 + (SIGNUM[signal] ?? 0);
}

/** pi's BashOperations.exec options. */
export interface BashExecOptions {
  onData: (data: Buffer) => void;
  signal?: AbortSignal;
  timeout?: number;
  env?: NodeJS.ProcessEnv;
}

/**
 * BashOperations in the sandbox. The environment pi passes (the host's) is ignored: the
 * guest gets the image's environment plus guestEnv().
 */
export function guestBashOperations(ready: ReadyFn, guestEnv: () => Record<string, string>, shellOverride: () => string | undefined) {
  return {
    async exec(command: string, cwd: string, opts: BashExecOptions): Promise<{ exitCode: number | null }> {
      if (opts.signal?.aborted) throw new Error("aborted");
      const r = ready();
      const shell = shellOverride() ?? r.tools.bash ?? r.tools.shell;
      if (!shell) throw new Error(`krunbox: the image ${r.status.image ?? ""} has no /bin/sh, so commands cannot run in the sandbox`);
      let exit;
      let started = false;
      try {
        exit = await r.client.exec(
          {
            sandbox: r.name,
            argv: [shell, "-c", command],
            cwd,
            env: guestEnv(),
            ...(opts.timeout && opts.timeout > 0 ? { timeoutMs: Math.round(opts.timeout * 1000) } : {}),
          },
          { onOutput: (_stream, data) => opts.onData(data), signal: opts.signal, startTimeoutMs: r.callTimeoutMs, onStart: () => (started = true) },
        );
      } catch (err) {
        const failed = isTimeout(err) ? r.timedOut(lateExec(JSON.stringify(shortCommand(command)), started, r.callTimeoutMs)) : undefined;
        if (opts.signal?.aborted) throw new Error("aborted"); // a health check goes on
        if (failed) throw await failed;
        if (err instanceof RpcError && err.code === ErrorCode.ExecFailed) {
          throw new Error(`krunbox: could not start ${shell} in the sandbox: ${err.message}`);
        }
        throw new Error(`krunbox: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (opts.signal?.aborted) throw new Error("aborted");
      if (exit.timedOut) throw new Error(`timeout:${opts.timeout}`);
      if (exit.error) throw new Error(`krunbox: ${exit.error.message}`);
      if (exit.signal) return { exitCode: signalExitCode(exit.signal) };
      return { exitCode: exit.exitCode };
    },
  };
}

/** Run a program in the sandbox and return its stdout, failing on a non-zero exit. */
export async function guestOutput(
  r: Ready,
  argv: string[],
  opts: { cwd?: string; stdin?: Buffer; signal?: AbortSignal; onStdout?: (d: Buffer) => void; okCodes?: number[] } = {},
): Promise<{ stdout: string; stderr: string; exitCode: number | null }> {
  let stdout = "";
  let stderr = "";
  let exit;
  let started = false;
  try {
    exit = await r.client.exec(
      {
        sandbox: r.name,
        argv,
        ...(opts.cwd ? { cwd: opts.cwd } : {}),
        ...(opts.stdin ? { stdin: opts.stdin.toString("base64") } : {}),
      },
      {
        signal: opts.signal,
        startTimeoutMs: r.callTimeoutMs,
        onStart: () => (started = true),
        onOutput: (stream, d) => {
          if (stream === "stderr") stderr += d.toString();
          else if (opts.onStdout) opts.onStdout(d);
          else stdout += d.toString();
        },
      },
    );
  } catch (err) {
    if (isTimeout(err)) throw await r.timedOut(lateExec(path.posix.basename(argv[0] ?? ""), started, r.callTimeoutMs));
    throw err;
  }
  if (exit.error) throw new Error(`krunbox: ${exit.error.message}`);
  return { stdout, stderr, exitCode: exit.exitCode };
}

/** Feeds chunks and calls onLine for every complete line. */
export class LineSplitter {
  private rest = "";
  constructor(private readonly onLine: (line: string) => void) {}
  push(chunk: Buffer | string): void {
    const text = this.rest + chunk.toString();
    const lines = text.split("\n");
    this.rest = lines.pop() ?? "";
    for (const l of lines) this.onLine(l);
  }
  end(): void {
    if (this.rest) this.onLine(this.rest);
    this.rest = "";
  }
}

/** The argv that lists the files under dir (absolute paths, one a line), pruning .git and node_modules. */
export function listFilesArgv(r: Ready, dir: string): string[] {
  if (r.tools.rg) return [r.tools.rg, "--files", "--hidden", "--no-config", "--no-messages", "--glob", "!.git", dir];
  if (r.tools.find) {
    return [r.tools.find, dir, "(", "-name", ".git", "-o", "-name", "node_modules", ")", "-prune", "-o", "(", "-type", "f", "-o", "-type", "l", ")", "-print"];
  }
  throw new Error(`krunbox: the image ${r.status.image ?? ""} has neither rg nor find, so files cannot be listed in the sandbox`);
}

/**
 * A matcher with the semantics of pi's find (fd --glob): a pattern without "/" matches file
 * names at any depth; with "/" it matches the path relative to the search directory (or the
 * absolute path for an absolute pattern); "*" matches dot files; all-lowercase patterns
 * ignore case.
 */
export function globMatcher(pattern: string, searchDir: string): (absPath: string) => boolean {
  const p = pattern.replace(/^(?:\.\/)+/, "");
  const nocase = p === p.toLowerCase();
  const opts = { dot: true, noext: true, nocase };
  if (!p.includes("/")) {
    const mm = new Minimatch(p, opts);
    return (abs) => mm.match(path.posix.basename(abs));
  }
  const mm = new Minimatch(p.replace(/\/\*\*$/, "/**/*"), opts);
  if (path.posix.isAbsolute(p)) return (abs) => mm.match(abs);
  return (abs) => mm.match(path.posix.relative(searchDir, abs));
}

/** pi's FindOperations.glob in the sandbox. */
export async function guestGlob(
  r: Ready,
  pattern: string,
  searchDir: string,
  opts: { ignore: string[]; limit: number },
): Promise<string[]> {
  const match = globMatcher(pattern, searchDir);
  const ignores = opts.ignore.map((g) => new Minimatch(g, { dot: true }));
  const found: string[] = [];
  const stop = new AbortController();
  const lines = new LineSplitter((line) => {
    if (!line || found.length >= opts.limit) return;
    const abs = path.posix.isAbsolute(line) ? line : path.posix.join(searchDir, line);
    const rel = path.posix.relative(searchDir, abs);
    if (ignores.some((m) => m.match(rel))) return;
    if (match(abs)) found.push(abs);
    if (found.length >= opts.limit) stop.abort();
  });
  const toolSignal = callSignal.getStore();
  const signal = toolSignal ? AbortSignal.any([stop.signal, toolSignal]) : stop.signal;
  const res = await guestOutput(r, listFilesArgv(r, searchDir), { signal, onStdout: (d) => lines.push(d) });
  lines.end();
  if (!stop.signal.aborted && res.exitCode !== 0 && found.length === 0 && res.stderr.trim()) {
    throw new Error(`krunbox: listing ${searchDir} failed: ${res.stderr.trim().split("\n")[0]}`);
  }
  return found;
}

/** What a command that timed out on the client's side did not do in time. */
function lateExec(what: string, started: boolean, ms: number): string {
  return started ? `the end of ${what} was not reported within ${formatMs(ms)} after it was killed or timed out` : `the start of ${what} got no answer within ${formatMs(ms)}`;
}

/** A command cut short for messages. */
function shortCommand(command: string): string {
  const one = command.replace(/\s+/g, " ").trim();
  return one.length > 60 ? `${one.slice(0, 57)}...` : one;
}
