// A stand-in for `krunbox serve --stdio` (docs/serve-protocol.md), for the extension's
// tests while the real server does not exist or cannot run.
//
// It is NOT a sandbox: commands run on the host, as the user running the tests. It emulates
// the parts that tests observe:
// - a sandbox is a directory under $KRUNBOX_HOME/standin/<name>/ holding its state and a
//   fake root file system (rootfs/);
// - the workspace and the configured mounts map to the same host paths; every other guest
//   path maps into rootfs/, so a file op on /root/x touches <rootfs>/root/x, not /root/x;
// - a command gets the "image" environment (PATH, HOME=<rootfs>/root, HOSTNAME=<name>) plus
//   the sandbox's and the call's env, never this process's environment, and runs in its
//   own process group with cwd mapped like any path.
//
// Knobs, read from this process's environment (the extension passes its own down):
// - KRUNBOX_LIBKRUN naming a missing file makes every start fail as the real one does;
// - KRUNBOX_STANDIN_BOOT_MS delays each start (to test tool calls that wait for it).

import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs/promises";
import * as path from "node:path";

const VERSION = "0.0.0-standin";
const LIMITS = { maxLineBytes: 64 << 20, maxReadBytes: 4 << 20, maxWriteBytes: 32 << 20 };
const NAME_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;
const SIGNALS = new Set(["SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGCONT", "SIGSTOP"]);
const REACH_KEYS = ["workspace", "image", "network", "mounts"] as const;
const OTHER_KEYS = ["cpus", "memoryMiB", "env", "idleTimeoutSec", "labels"] as const;

class ServeError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: object,
  ) {
    super(message);
  }
}

interface Mount {
  host: string;
  guest: string;
  readOnly: boolean;
}

interface Config {
  image: string;
  pull: string;
  cpus: number;
  memoryMiB: number;
  network: string;
  mounts: Mount[];
  env: Record<string, string>;
  idleTimeoutSec: number;
  labels: Record<string, string>;
}

interface Stored {
  name: string;
  workspace: string;
  config: Config;
  state: "stopped" | "ready" | "failed";
  reason?: string;
}

const home = process.env.KRUNBOX_HOME || path.join(process.env.XDG_STATE_HOME || path.join(process.env.HOME || "/tmp", ".local/state"), "krunbox");
const root = path.join(home, "standin");
let initialized = false;
const execs = new Map<string, { child: ChildProcess; exited: boolean }>();
const watched = new Map<string, NodeJS.Timeout | undefined>();

function log(msg: string): void {
  process.stderr.write(`time=${new Date().toISOString()} level=INFO msg=${JSON.stringify(msg)}\n`);
}

function send(msg: object): void {
  process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
}

function notify(method: string, params: object): void {
  send({ method, params });
}

// ---- sandbox state ----

function dir(name: string): string {
  return path.join(root, name);
}

async function load(name: string): Promise<Stored | undefined> {
  try {
    return JSON.parse(await fs.readFile(path.join(dir(name), "sandbox.json"), "utf8")) as Stored;
  } catch {
    return undefined;
  }
}

async function save(s: Stored): Promise<void> {
  await fs.mkdir(dir(s.name), { recursive: true });
  const tmp = path.join(dir(s.name), `.sandbox.json.${process.pid}`);
  await fs.writeFile(tmp, JSON.stringify(s, null, 2));
  await fs.rename(tmp, path.join(dir(s.name), "sandbox.json"));
}

async function consoleLog(name: string, line: string): Promise<void> {
  await fs.mkdir(dir(name), { recursive: true });
  await fs.appendFile(path.join(dir(name), "console.log"), `${line}\n`);
}

function status(s: Stored | undefined, name: string, extra: object = {}): object {
  if (!s) return { name, state: "absent" };
  return {
    name,
    state: s.state,
    image: s.config.image,
    workspace: s.workspace,
    hostname: name,
    ...(s.reason ? { reason: s.reason, hint: "see /krunbox logs; fix the cause and run /krunbox restart" } : {}),
    ...extra,
  };
}

function str(p: Record<string, unknown>, key: string, required = true): string | undefined {
  const v = p[key];
  if (v === undefined && !required) return undefined;
  if (typeof v !== "string" || v === "") throw new ServeError(-32602, `${key}: want a non-empty string`);
  return v;
}

function absPath(p: Record<string, unknown>, key: string): string {
  const v = str(p, key) as string;
  if (!path.isAbsolute(v)) throw new ServeError(-32602, `${key} ${v}: not an absolute path`);
  return path.normalize(v);
}

function sandboxName(p: Record<string, unknown>, key = "name"): string {
  const v = str(p, key) as string;
  if (!NAME_RE.test(v)) throw new ServeError(-32602, `${key} ${JSON.stringify(v)}: want ^[a-z0-9][a-z0-9-]{0,62}$`);
  return v;
}

function strMap(v: unknown, key: string): Record<string, string> {
  if (v === undefined) return {};
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new ServeError(1012, `${key}: want an object of strings`);
  for (const [k, x] of Object.entries(v)) if (typeof x !== "string") throw new ServeError(1012, `${key}.${k}: want a string`);
  return v as Record<string, string>;
}

function within(p: string, dirPath: string): boolean {
  return p === dirPath || p.startsWith(dirPath.endsWith("/") ? dirPath : `${dirPath}/`);
}

async function parseEnsure(p: Record<string, unknown>): Promise<{ name: string; workspace: string; config: Config; startTimeoutMs: number }> {
  const name = sandboxName(p);
  const workspace = absPath(p, "workspace");
  const st = await fs.stat(workspace).catch(() => undefined);
  if (!st?.isDirectory()) throw new ServeError(1012, `workspace ${workspace}: not an existing directory`);
  const c = (p.config ?? {}) as Record<string, unknown>;
  if (typeof c !== "object") throw new ServeError(-32602, "config: want an object");
  if (typeof c.image !== "string" || !c.image) throw new ServeError(1012, "config.image: want an image reference");
  const local = ["oci:", "docker-archive:"].find((prefix) => (c.image as string).startsWith(prefix));
  if (local && c.imageTrusted !== true) throw new ServeError(1012, `config.image ${c.image}: a local image source, which only the user's own configuration may name`);
  if (local && !path.isAbsolute((c.image as string).slice(local.length).split(":")[0])) {
    throw new ServeError(1012, `config.image ${c.image}: a local image's path must be absolute`);
  }
  const cpus = c.cpus ?? 2;
  if (!Number.isInteger(cpus) || (cpus as number) < 1) throw new ServeError(1012, `config.cpus ${cpus}: want an integer ≥ 1`);
  const memoryMiB = c.memoryMiB ?? 2048;
  if (!Number.isInteger(memoryMiB) || (memoryMiB as number) < 128) throw new ServeError(1012, `config.memoryMiB ${memoryMiB}: want an integer ≥ 128`);
  const network = String(c.network ?? "public");
  if (!["public", "open", "tsi", "none"].includes(network) && !/^allow=\S+$/.test(network)) {
    throw new ServeError(1012, `config.network ${JSON.stringify(network)}: want public, allow=RULE,..., open, tsi or none`);
  }
  const pull = c.pull ?? "missing";
  if (!["missing", "always", "never"].includes(pull as string)) throw new ServeError(1012, `config.pull ${JSON.stringify(pull)}: want missing, always or never`);
  const idleTimeoutSec = c.idleTimeoutSec ?? 0;
  if (!Number.isInteger(idleTimeoutSec) || (idleTimeoutSec as number) < 0) throw new ServeError(1012, `config.idleTimeoutSec: want an integer ≥ 0`);
  const mounts: Mount[] = [];
  for (const m of (c.mounts ?? []) as Record<string, unknown>[]) {
    if (typeof m.host !== "string" || !path.isAbsolute(m.host)) throw new ServeError(1012, `mount host ${JSON.stringify(m.host)}: want an absolute path`);
    const guest = typeof m.guest === "string" ? m.guest : m.host;
    if (!path.isAbsolute(guest)) throw new ServeError(1012, `mount guest ${guest}: want an absolute path`);
    for (const bad of ["/", "/proc", "/sys", "/dev"]) if (path.normalize(guest) === bad) throw new ServeError(1012, `mount at ${guest} would shadow ${bad}`);
    for (const other of [workspace, ...mounts.map((x) => x.guest)]) {
      if (within(guest, other) || within(other, guest)) throw new ServeError(1012, `mount at ${guest} overlaps ${other}`);
    }
    mounts.push({ host: path.normalize(m.host), guest: path.normalize(guest), readOnly: m.readOnly === true });
  }
  const startTimeoutMs = (p.startTimeoutMs as number | undefined) ?? 120_000;
  return {
    name,
    workspace,
    startTimeoutMs,
    config: {
      image: c.image,
      pull: pull as string,
      cpus: cpus as number,
      memoryMiB: memoryMiB as number,
      network: network as string,
      mounts,
      env: strMap(c.env, "config.env"),
      idleTimeoutSec: idleTimeoutSec as number,
      labels: strMap(c.labels, "config.labels"),
    },
  };
}

function differs(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) !== JSON.stringify(b);
}

function keyValue(s: { workspace: string; config: Config }, key: string): unknown {
  return key === "workspace" ? s.workspace : s.config[key as keyof Config];
}

async function boot(s: Stored, startTimeoutMs: number): Promise<number> {
  const started = Date.now();
  notify("sandbox.progress", { name: s.name, phase: "boot", message: "starting VM (stand-in)" });
  const lib = process.env.KRUNBOX_LIBKRUN;
  if (lib) {
    const ok = await fs.stat(lib).then((st) => st.isFile()).catch(() => false);
    if (!ok) {
      const reason = `load libkrun: ${lib}: no such file`;
      await consoleLog(s.name, `runner: ${reason}`);
      s.state = "failed";
      s.reason = reason;
      await save(s);
      throw new ServeError(1003, `start ${s.name}: ${reason}`, {
        hint: "KRUNBOX_LIBKRUN names a file that does not exist: point it at libkrun.so.1 or unset it",
        status: status(s, s.name),
        consoleTail: `runner: ${reason}\n`,
      });
    }
  }
  const delay = Number(process.env.KRUNBOX_STANDIN_BOOT_MS || 0);
  if (delay > startTimeoutMs) {
    await new Promise((r) => setTimeout(r, startTimeoutMs));
    throw new ServeError(1003, `start ${s.name}: no hello from the agent within ${startTimeoutMs} ms`, { status: status(s, s.name) });
  }
  if (delay > 0) await new Promise((r) => setTimeout(r, delay));
  await fs.mkdir(path.join(dir(s.name), "rootfs", "root"), { recursive: true });
  await fs.mkdir(path.join(dir(s.name), "rootfs", "tmp"), { recursive: true });
  await consoleLog(s.name, `agent: hello (stand-in ${VERSION})`);
  s.state = "ready";
  delete s.reason;
  await save(s);
  watch(s);
  return Date.now() - started;
}

// watch arms the idle timer of a sandbox this connection made ready.
function watch(s: Stored): void {
  clearTimeout(watched.get(s.name));
  if (s.config.idleTimeoutSec <= 0) {
    watched.set(s.name, undefined);
    return;
  }
  watched.set(
    s.name,
    setTimeout(async () => {
      const cur = await load(s.name);
      if (!cur || cur.state !== "ready") return;
      cur.state = "stopped";
      await save(cur);
      await consoleLog(s.name, "agent: idle timeout, shutting down");
      notify("sandbox.state", { name: s.name, status: status(cur, s.name) });
    }, s.config.idleTimeoutSec * 1000),
  );
}

async function ready(name: string): Promise<Stored> {
  const s = await load(name);
  if (!s || s.state !== "ready") {
    throw new ServeError(1002, `sandbox ${name} is not running (${s ? s.state : "absent"})`, {
      status: status(s, name),
      hint: "start it with sandbox.ensure",
    });
  }
  if (watched.has(name)) watch(s);
  return s;
}

function guestToHost(s: Stored, guest: string): string {
  const p = path.normalize(guest);
  if (within(p, s.workspace)) return p;
  for (const m of s.config.mounts) if (within(p, m.guest)) return path.join(m.host, path.relative(m.guest, p));
  return path.join(dir(s.name), "rootfs", p);
}

// ---- methods ----

type Handler = (p: Record<string, unknown>) => Promise<unknown>;

const methods: Record<string, Handler> = {
  async initialize(p) {
    if (p.protocolVersion !== 1) throw new ServeError(1001, `protocol version ${p.protocolVersion} is not supported`, { supported: [1] });
    initialized = true;
    return { protocolVersion: 1, server: { name: "krunbox-standin", version: VERSION }, limits: LIMITS };
  },

  async "sandbox.ensure"(p) {
    const req = await parseEnsure(p);
    let s = await load(req.name);
    let created = false;
    const configChanged: string[] = [];
    if (s) {
      const keys = REACH_KEYS.filter((k) => differs(keyValue(s as Stored, k), keyValue(req, k)));
      if (keys.length) {
        throw new ServeError(1004, `sandbox ${req.name} exists with another ${keys.join(", ")}`, {
          keys,
          status: status(s, req.name),
          hint: "restart it with recreate to apply the new configuration",
        });
      }
      for (const k of OTHER_KEYS) if (differs(keyValue(s, k), keyValue(req, k))) configChanged.push(k);
      if (s.state === "ready") {
        watch(s);
        return status(s, req.name, { created, configChanged });
      }
    } else {
      s = { name: req.name, workspace: req.workspace, config: req.config, state: "stopped" };
      created = true;
      await save(s);
      await fs.writeFile(path.join(dir(req.name), "console.log"), "");
    }
    const bootMs = await boot(s, req.startTimeoutMs);
    return status(s, req.name, { bootMs, created, configChanged });
  },

  async "sandbox.status"(p) {
    const name = sandboxName(p);
    return status(await load(name), name);
  },

  async "sandbox.restart"(p) {
    const req = await parseEnsure(p);
    const old = await load(req.name);
    for (const [id, e] of execs) {
      if (!e.exited && old) killGroup(id, "SIGKILL");
    }
    let created = false;
    let s: Stored;
    if (!old || p.recreate === true) {
      await fs.rm(dir(req.name), { recursive: true, force: true });
      s = { name: req.name, workspace: req.workspace, config: req.config, state: "stopped" };
      created = true;
      await save(s);
    } else {
      s = { ...old, state: "stopped" };
      await save(s);
    }
    const bootMs = await boot(s, req.startTimeoutMs);
    return status(s, req.name, { bootMs, created });
  },

  async "sandbox.stop"(p) {
    const name = sandboxName(p);
    clearTimeout(watched.get(name));
    watched.delete(name);
    const s = await load(name);
    if (!s) return status(undefined, name);
    if (p.remove === true) {
      await fs.rm(dir(name), { recursive: true, force: true });
      return status(undefined, name);
    }
    s.state = "stopped";
    delete s.reason;
    await save(s);
    await consoleLog(name, "agent: shutdown requested");
    return status(s, name);
  },

  async "sandbox.network"(p) {
    const name = sandboxName(p);
    const op = p.op;
    const rules = p.rules;
    if (op !== "allow" && op !== "deny") throw new ServeError(-32602, `op ${JSON.stringify(op)}: want allow or deny`);
    if (!Array.isArray(rules) || rules.length === 0 || rules.some((r) => typeof r !== "string" || !/^[^\s,]+$/.test(r))) {
      throw new ServeError(rules === undefined || (Array.isArray(rules) && rules.length === 0) ? -32602 : 1012, "rules: want host names, *.domain, IPs or CIDRs");
    }
    const s = await ready(name);
    if (!s.config.network.startsWith("allow=")) throw new ServeError(1002, `sandbox ${name}: network ${s.config.network}: rules apply to network allow=... only`);
    const target = (r: string) => r.replace(/:[0-9+]+$/, "");
    let have = s.config.network.slice("allow=".length).split(",");
    for (const r of rules as string[]) {
      have = have.filter((h) => target(h) !== target(r));
      if (op === "allow") have.push(r);
    }
    s.config.network = `allow=${have.join(",")}`;
    await save(s);
    return { network: s.config.network };
  },

  async "sandbox.logs"(p) {
    const name = sandboxName(p);
    const max = (p.maxBytes as number | undefined) ?? 65536;
    const buf = await fs.readFile(path.join(dir(name), "console.log")).catch(() => Buffer.alloc(0));
    return { text: buf.subarray(Math.max(0, buf.length - max)).toString("utf8"), truncated: buf.length > max };
  },

  async "exec.start"(p) {
    const s = await ready(sandboxName(p, "sandbox"));
    const execId = str(p, "execId") as string;
    if (execId.length > 64) throw new ServeError(-32602, "execId: at most 64 characters");
    if (execs.get(execId)?.exited === false) throw new ServeError(-32602, `execId ${execId} is already running`);
    const argv = p.argv;
    if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== "string")) {
      throw new ServeError(-32602, "argv: want a non-empty array of strings");
    }
    const cwdGuest = p.cwd === undefined ? s.workspace : absPath(p, "cwd");
    const cwd = guestToHost(s, cwdGuest);
    const cst = await fs.stat(cwd).catch(() => undefined);
    if (!cst?.isDirectory()) throw new ServeError(1009, `exec ${argv[0]}: working directory ${cwdGuest} does not exist`, { reason: "cwd" });
    const env = {
      PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      HOME: guestToHost(s, "/root"),
      HOSTNAME: s.name,
      ...s.config.env,
      ...strMap(p.env, "env"),
    };
    const child = spawn(argv[0] as string, argv.slice(1) as string[], {
      cwd,
      env,
      detached: true,
      stdio: [p.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    await new Promise<void>((resolve, reject) => {
      child.once("spawn", resolve);
      child.once("error", (err: NodeJS.ErrnoException) => {
        const reason = err.code === "ENOENT" ? "not-found" : err.code === "EACCES" ? "permission" : "other";
        reject(new ServeError(1009, `exec ${argv[0]}: ${reason === "not-found" ? "executable file not found in $PATH" : err.message}`, { reason }));
      });
    });
    const entry = { child, exited: false };
    execs.set(execId, entry);
    if (typeof p.stdin === "string") child.stdin?.end(Buffer.from(p.stdin, "base64"));
    let timedOut = false;
    const timeoutMs = p.timeoutMs as number | undefined;
    const timer = timeoutMs && timeoutMs > 0 ? setTimeout(() => {
      timedOut = true;
      killGroup(execId, "SIGKILL");
    }, timeoutMs) : undefined;
    // Queue the notifications until the response is out (§5.1).
    setImmediate(() => {
      for (const stream of ["stdout", "stderr"] as const) {
        child[stream]?.on("data", (chunk: Buffer) => notify("exec.output", { execId, stream, data: chunk.toString("base64") }));
      }
      child.once("close", (code, signal) => {
        clearTimeout(timer);
        entry.exited = true;
        notify("exec.exit", { execId, exitCode: signal ? null : code, signal: signal ?? null, timedOut });
      });
    });
    return { execId, pid: child.pid };
  },

  async "exec.signal"(p) {
    const execId = str(p, "execId") as string;
    const sig = str(p, "signal") as string;
    if (!SIGNALS.has(sig)) throw new ServeError(-32602, `signal ${sig}: not allowed`);
    return { delivered: killGroup(execId, sig as NodeJS.Signals) };
  },

  async "fs.readFile"(p) {
    const s = await ready(sandboxName(p, "sandbox"));
    const host = guestToHost(s, absPath(p, "path"));
    const offset = (p.offset as number | undefined) ?? 0;
    const length = (p.length as number | undefined) ?? LIMITS.maxReadBytes;
    if (length > LIMITS.maxReadBytes) throw new ServeError(1010, `length ${length} is over ${LIMITS.maxReadBytes}`);
    const fh = await fs.open(host, "r");
    try {
      const st = await fh.stat();
      if (st.isDirectory()) throw Object.assign(new Error("is a directory"), { code: "EISDIR" });
      const buf = Buffer.alloc(Math.max(0, Math.min(length, st.size - offset)));
      const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
      return { data: buf.subarray(0, bytesRead).toString("base64"), size: st.size, eof: offset + bytesRead >= st.size };
    } finally {
      await fh.close();
    }
  },

  async "fs.writeFile"(p) {
    const s = await ready(sandboxName(p, "sandbox"));
    const guest = absPath(p, "path");
    if (typeof p.data !== "string") throw new ServeError(-32602, "data: want base64");
    const data = Buffer.from(p.data, "base64");
    if (data.length > LIMITS.maxWriteBytes) throw new ServeError(1010, `write of ${data.length} bytes is over ${LIMITS.maxWriteBytes}`);
    let host = guestToHost(s, guest);
    const ro = s.config.mounts.find((m) => m.readOnly && within(path.normalize(guest), m.guest));
    if (ro) throw Object.assign(new Error(`${guest}: read-only file system`), { code: "EROFS" });
    if (p.mkdirs === true) await fs.mkdir(path.dirname(host), { recursive: true });
    const lst = await fs.lstat(host).catch(() => undefined);
    if (lst?.isSymbolicLink()) host = await fs.realpath(host);
    const st = await fs.stat(host).catch(() => undefined);
    if (st?.isDirectory()) throw Object.assign(new Error("is a directory"), { code: "EISDIR" });
    const tmp = path.join(path.dirname(host), `.krunbox-write-${process.pid}-${Math.random().toString(36).slice(2)}`);
    try {
      await fs.writeFile(tmp, data, { mode: st ? st.mode & 0o7777 : ((p.mode as number | undefined) ?? 0o644) });
      await fs.rename(tmp, host);
    } catch (err) {
      await fs.rm(tmp, { force: true });
      throw err;
    }
    return { size: data.length };
  },

  async "fs.stat"(p) {
    const s = await ready(sandboxName(p, "sandbox"));
    const host = guestToHost(s, absPath(p, "path"));
    const st = p.lstat === true ? await fs.lstat(host) : await fs.stat(host);
    return { type: fileType(st), size: st.size, mode: st.mode & 0o7777, mtimeMs: Math.floor(st.mtimeMs) };
  },

  async "fs.readDir"(p) {
    const s = await ready(sandboxName(p, "sandbox"));
    const host = guestToHost(s, absPath(p, "path"));
    const entries = await fs.readdir(host, { withFileTypes: true });
    return { entries: entries.map((e) => ({ name: e.name, type: fileType(e) })) };
  },

  async "fs.mkdirAll"(p) {
    const s = await ready(sandboxName(p, "sandbox"));
    const host = guestToHost(s, absPath(p, "path"));
    await fs.mkdir(host, { recursive: true, mode: (p.mode as number | undefined) ?? 0o755 });
    return {};
  },
};

function fileType(st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): string {
  if (st.isSymbolicLink()) return "symlink";
  if (st.isDirectory()) return "dir";
  if (st.isFile()) return "file";
  return "other";
}

function killGroup(execId: string, sig: NodeJS.Signals): boolean {
  const e = execs.get(execId);
  if (!e || e.exited || !e.child.pid) return false;
  try {
    process.kill(-e.child.pid, sig);
    return true;
  } catch {
    return false;
  }
}

const errnoCodes: Record<string, number> = { ENOENT: 1005, ENOTDIR: 1006, EISDIR: 1007, EACCES: 1008, EPERM: 1008, EROFS: 1008 };

async function handle(line: string): Promise<void> {
  let msg: { id?: unknown; method?: unknown; params?: unknown };
  try {
    msg = JSON.parse(line);
  } catch {
    send({ id: null, error: { code: -32700, message: "parse error: not JSON" } });
    return;
  }
  if (typeof msg !== "object" || msg === null || Array.isArray(msg) || typeof msg.method !== "string") {
    send({ id: null, error: { code: -32600, message: "invalid request: want a JSON-RPC request object" } });
    return;
  }
  const id = msg.id;
  if (id === undefined) return; // a client notification: none are defined
  const fn = methods[msg.method];
  try {
    if (!fn) throw new ServeError(-32601, `method ${msg.method} not found`);
    if (!initialized && msg.method !== "initialize") throw new ServeError(-32002, "not initialized: send initialize first");
    const params = (msg.params ?? {}) as Record<string, unknown>;
    if (typeof params !== "object" || Array.isArray(params)) throw new ServeError(-32602, "params: want an object");
    send({ id, result: await fn(params) });
  } catch (err) {
    if (err instanceof ServeError) {
      send({ id, error: { code: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) } });
      return;
    }
    const e = err as NodeJS.ErrnoException;
    const code = (e.code && errnoCodes[e.code]) || 1011;
    send({ id, error: { code, message: `${msg.method}: ${e.message}` } });
  }
}

function shutdown(): void {
  for (const id of execs.keys()) killGroup(id, "SIGKILL");
  process.exit(0);
}

let parts: Buffer[] = [];
process.stdin.on("data", (chunk: Buffer) => {
  let start = 0;
  for (;;) {
    const nl = chunk.indexOf(0x0a, start);
    if (nl < 0) break;
    const line = Buffer.concat([...parts, chunk.subarray(start, nl)]).toString("utf8");
    parts = [];
    start = nl + 1;
    if (line.trim()) void handle(line);
  }
  if (start < chunk.length) parts.push(chunk.subarray(start));
});
process.stdin.on("end", shutdown);
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
const args = process.argv.slice(2);
if (args[0] !== "serve" || args[1] !== "--stdio") {
  process.stderr.write(`krunbox (stand-in): only "serve --stdio" is implemented, got ${JSON.stringify(args)}\n`);
  process.exit(125);
}
log(`krunbox serve stand-in ${VERSION} on stdio, state in ${root}, pid ${process.pid}`);
