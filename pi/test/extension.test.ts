// The extension's routing and gating, with pi's real tool definitions (0.73.1 from
// node_modules) behind a fake ExtensionAPI and a serve server (the stand-in by default).

import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { KrunboxExtension, RPC_BASH_WARNING, rpcBashBypasses } from "../src/extension.ts";
import { ServeClient } from "../src/rpc.ts";
import { sandboxName } from "../src/workspace.ts";
import { FakePi, registerHostTool } from "./fake-pi.ts";
import { eventually, IMAGE, IS_STANDIN, removeSandboxes, SERVE_BIN, STANDIN, serveProcesses, stopProcesses } from "./serve-driver.ts";

// pi hands the host environment (this process's) to bash operations: it must not reach the guest.
process.env.HOST_SECRET = "do-not-leak";

const roots: string[] = [];
const sessions: Setup[] = [];
// Sessions a failed test left open would keep their krunbox serve (and this process) alive;
// a real krunbox keeps the sandboxes running after them.
after(async () => {
  for (const s of sessions) {
    await s.pi.emit("session_shutdown", { reason: "quit" });
    await removeSandboxes({ bin: s.env.KRUNBOX_BIN as string, env: s.env }, s.home);
  }
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

interface Setup {
  pi: FakePi;
  ext: KrunboxExtension;
  ws: string;
  home: string;
  env: NodeJS.ProcessEnv;
}

/** A workspace, a KRUNBOX_HOME with a user config, and the extension registered on a FakePi. */
async function setup(
  opts: {
    user?: string;
    project?: string;
    env?: NodeJS.ProcessEnv;
    trust?: boolean;
    argv?: string[];
    /** pi's working directory, relative to the workspace (default: the workspace). */
    cwd?: string;
    /** Give pi's cwd a .pi/settings.json: pi 1.x then decides its trust. */
    piSettings?: boolean;
    bin?: string;
    start?: boolean;
  } = {},
): Promise<Setup> {
  const root = realpathSync(mkdtempSync(path.join(tmpdir(), "krunbox-ext-")));
  roots.push(root);
  const ws = path.join(root, "ws");
  const home = path.join(root, "kh");
  mkdirSync(path.join(ws, ".git"), { recursive: true });
  mkdirSync(path.join(home, "config"), { recursive: true });
  writeFileSync(path.join(home, "config", "pi.toml"), `image = ${JSON.stringify(IMAGE)}\n${opts.user ?? ""}`);
  if (opts.project) {
    mkdirSync(path.join(ws, ".pi"), { recursive: true });
    writeFileSync(path.join(ws, ".pi", "krunbox.toml"), opts.project);
  }
  const cwd = path.join(ws, opts.cwd ?? "");
  mkdirSync(cwd, { recursive: true });
  if (opts.piSettings) {
    mkdirSync(path.join(cwd, ".pi"), { recursive: true });
    writeFileSync(path.join(cwd, ".pi", "settings.json"), "{}");
  }
  const fromEnv = process.env.KRUNBOX_SERVE_ENV ? (JSON.parse(process.env.KRUNBOX_SERVE_ENV) as NodeJS.ProcessEnv) : {};
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, KRUNBOX_HOME: home, KRUNBOX_BIN: opts.bin ?? SERVE_BIN, HOST_SECRET: "do-not-leak", ...fromEnv, ...opts.env };
  const pi = new FakePi(cwd, opts.trust);
  const ext = new KrunboxExtension(pi.api(), {
    env,
    argv: opts.argv ?? ["node", "pi"],
    findBinary: (e) => ({ path: e.KRUNBOX_BIN as string, source: "KRUNBOX_BIN" }),
  });
  ext.register();
  const s = { pi, ext, ws, home, env };
  sessions.push(s);
  if (opts.start !== false) await pi.emit("session_start", { reason: "startup" });
  return s;
}

async function ready(s: Setup): Promise<void> {
  await eventually(() => /ready/.test(s.pi.status()), `ready, status is ${s.pi.status()}`, 60_000);
}

async function shutdown(s: Setup): Promise<void> {
  await s.pi.emit("session_shutdown", { reason: "quit" });
}

/** A call of each routed tool that would leave marker behind if it ran. */
function everyTool(marker: string): [string, Record<string, unknown>][] {
  return [
    ["bash", { command: `touch ${marker}` }],
    ["write", { path: marker, content: "x" }],
    ["read", { path: "/etc/hostname" }],
    ["edit", { path: marker, edits: [] }],
    ["ls", {}],
    ["find", { pattern: "*" }],
    ["grep", { pattern: "x" }],
  ];
}

/** The extension's krunbox serve connection. */
function serverOf(s: Setup): ServeClient {
  return (s.ext as unknown as { ctrl: { connection: ServeClient } }).ctrl.connection;
}

describe("a sandbox that cannot be used blocks everything", () => {
  test("a bad configuration: session_start does not throw, every tool is blocked, nothing runs", async () => {
    const s = await setup({ user: `network = "wide-open"\n` });
    assert.match(s.pi.status(), /^krunbox: blocked \(configuration: .*network/);
    const marker = path.join(s.ws, "ran");
    for (const [tool, input] of everyTool(marker)) {
      const r = await s.pi.call(tool, input);
      assert.ok(r.blocked, `${tool} must be blocked`);
      assert.match(r.blocked, /krunbox: blocked, nothing ran: configuration: .*network/);
    }
    const ub = await s.pi.emit("user_bash", { command: `touch ${marker}`, cwd: s.ws, excludeFromContext: false });
    assert.equal(ub.result.exitCode, 1);
    assert.match(ub.result.output, /blocked/);
    assert.equal(existsSync(marker), false);
  });

  test("tools executed without the gate still cannot reach the host", async () => {
    const s = await setup({ user: `network = "wide-open"\n` });
    const marker = path.join(s.ws, "ran");
    for (const [tool, input] of [
      ["bash", { command: `touch ${marker}` }],
      ["write", { path: marker, content: "x" }],
    ] as const) {
      await assert.rejects(s.pi.tools.get(tool)?.execute("no-gate", input, undefined, undefined, s.pi.ctx()));
    }
    assert.equal(existsSync(marker), false);
  });

  test("no krunbox binary: blocked with where it looked", async () => {
    const s = await setup({ start: false });
    const pi = new FakePi(s.ws);
    new KrunboxExtension(pi.api(), { env: { PATH: "/nonexistent", KRUNBOX_HOME: s.home } }).register();
    await pi.emit("session_start", { reason: "startup" });
    assert.match(pi.status(), /blocked \(krunbox not found/);
    assert.match((await pi.call("bash", { command: "true" })).blocked ?? "", /krunbox not found/);
  });

  test("a workspace that is the home directory is refused, not mounted", async () => {
    const s = await setup({ start: false });
    const pi = new FakePi(s.home);
    new KrunboxExtension(pi.api(), { env: { ...s.env, HOME: s.home }, findBinary: (e) => ({ path: e.KRUNBOX_BIN as string, source: "KRUNBOX_BIN" }) }).register();
    await pi.emit("session_start", { reason: "startup" });
    assert.match(pi.status(), /blocked \(refusing to mount .* \(your home directory\)/);
    assert.match((await pi.call("bash", { command: "true" })).blocked ?? "", /refusing to mount/);
    await pi.command("krunbox", "on");
    await pi.command("krunbox", "restart");
    assert.match((await pi.call("bash", { command: "true" })).blocked ?? "", /refusing to mount/, "/krunbox on and restart refuse too");
  });

  test("a sandbox that fails to start: blocked with the reason and the hint", async () => {
    const s = await setup({ env: { KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" } });
    await eventually(() => /blocked/.test(s.pi.status()), "blocked");
    assert.match(s.pi.status(), /blocked \(start .*libkrun/);
    const r = await s.pi.call("bash", { command: `touch ${path.join(s.ws, "ran")}` });
    assert.match(r.blocked ?? "", /could not start: .*libkrun.*KRUNBOX_LIBKRUN/);
    assert.equal(existsSync(path.join(s.ws, "ran")), false);
    assert.ok(s.pi.notes.some((n) => n.level === "error" && /could not start/.test(n.message) && /\/krunbox off/.test(n.message)));
    await shutdown(s);
  });

  test("tools of other extensions are blocked while sandboxed, unless passed through (labelled)", async () => {
    const s = await setup({ user: `pass_through_tools = ["allowed_tool"]\n` });
    await ready(s);
    let ran = 0;
    registerHostTool(s.pi, "host_tool", () => ran++);
    registerHostTool(s.pi, "allowed_tool", () => ran++);
    const blocked = await s.pi.call("host_tool", {});
    assert.match(blocked.blocked ?? "", /"host_tool" would run on the host.*pass_through_tools/);
    assert.equal(ran, 0);
    const allowed = await s.pi.call("allowed_tool", {});
    assert.equal(ran, 1);
    assert.match(allowed.text, /^\[krunbox\] ran on the HOST, not in the sandbox \("allowed_tool" is in pass_through_tools\)\n/);
    await shutdown(s);
  });
});

/** The runner of a real sandbox (the VM) and every process under it, from its runner.pid (Linux). */
function vmProcesses(krunboxHome: string, name: string): number[] {
  const runner = (JSON.parse(readFileSync(path.join(krunboxHome, "state", "sandboxes", name, "runner.pid"), "utf8")) as { pid: number }).pid;
  const parent = new Map<number, number>();
  for (const p of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, "utf8");
      parent.set(Number(p), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // gone
    }
  }
  const found = [runner];
  for (let i = 0; i < found.length; i++) for (const [pid, ppid] of parent) if (ppid === found[i]) found.push(pid);
  return found;
}

/** Send sig to every pid that still exists. */
function signalAll(pids: number[], sig: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // gone
    }
  }
}

describe("an unresponsive sandbox blocks everything until it answers again", () => {
  // One second for a file call or a command's start, then (the VM case) four for the health
  // check: the server's own ping of the guest agent takes up to two.
  const deadlines = (health: number) => `call_timeout_sec = 1\nhealth_timeout_sec = ${health}\n`;

  /** Everything blocked with the reason, nothing ran; the footer says so. */
  async function assertBlocked(s: Setup, why: RegExp): Promise<void> {
    assert.match(s.pi.status(), new RegExp(`^krunbox: blocked \\(unresponsive: ${why.source}`));
    const marker = path.join(s.ws, "ran");
    for (const [tool, input] of everyTool(marker)) {
      const t0 = Date.now();
      const r = await s.pi.call(tool, input);
      assert.match(r.blocked ?? "", new RegExp(`^krunbox: blocked, nothing ran: the sandbox is unresponsive: ${why.source}.*/krunbox restart.*/krunbox logs`), tool);
      assert.ok(Date.now() - t0 < 500, `${tool} is blocked at once, not after a deadline`);
    }
    const ub = await s.pi.emit("user_bash", { command: `touch ${marker}`, cwd: s.ws, excludeFromContext: false });
    assert.match(ub.result.output, /blocked, "touch .*" did not run: the sandbox is unresponsive/);
    assert.equal(existsSync(marker), false, "nothing ran");
    assert.ok(s.pi.notes.some((n) => n.level === "error" && /the sandbox is unresponsive/.test(n.message) && /\/krunbox restart/.test(n.message)));
  }

  /** The first call fails within the deadlines saying the sandbox is unresponsive. */
  async function assertCallFails(s: Setup, tool: string, input: Record<string, unknown>, why: RegExp, withinMs: number): Promise<void> {
    const t0 = Date.now();
    const r = await s.pi.call(tool, input);
    const took = Date.now() - t0;
    assert.equal(r.blocked, undefined, "the gate let it through: the sandbox looked ready");
    assert.equal(r.isError, true);
    assert.match(r.text, new RegExp(`^krunbox: the sandbox is unresponsive: ${why.source}.*/krunbox restart.*/krunbox logs`));
    assert.ok(took >= 1000 && took < withinMs, `${tool} failed after ${took} ms, want 1000 to ${withinMs}`);
  }

  // Without deadlines such a call hangs: the tests' own timeouts turn that into a failure.
  test("a stopped krunbox serve: the call fails within the deadlines, the rest is blocked, SIGCONT recovers", { timeout: 60_000 }, async () => {
    const s = await setup({ user: deadlines(1) });
    await ready(s);
    writeFileSync(path.join(s.ws, "f.txt"), "before\n");
    const pid = serverOf(s).pid as number;
    await stopProcesses([pid]);
    try {
      const why = /krunbox serve \(pid \d+\) does not answer: fs\.readFile \S+ got no answer within 1 s, nor did a health check within 1 s/;
      await assertCallFails(s, "read", { path: "f.txt" }, why, 1000 + 1000 + 1500);
      await assertBlocked(s, why);
      await s.pi.command("krunbox", "status");
      assert.match(s.pi.notes[s.pi.notes.length - 1]?.message ?? "", /server says: krunbox serve did not answer sandbox\.status within 1 s/, "/krunbox status answers");
    } finally {
      process.kill(pid, "SIGCONT");
    }
    await eventually(() => /ready/.test(s.pi.status()), "recovery after SIGCONT");
    assert.ok(s.pi.notes.some((n) => /answers again/.test(n.message)));
    assert.match((await s.pi.call("read", { path: "f.txt" })).text, /before/);
    assert.match((await s.pi.call("bash", { command: "echo again" })).text, /again/);
    await shutdown(s);
  });

  test("a stopped krunbox serve: a command's start fails within the deadlines; /krunbox restart replaces the server", { timeout: 60_000 }, async () => {
    const s = await setup({ user: deadlines(1) });
    await ready(s);
    const first = serverOf(s);
    const marker = path.join(s.ws, "late");
    await stopProcesses([first.pid as number]);
    try {
      await assertCallFails(s, "bash", { command: `touch ${marker}` }, /krunbox serve \(pid \d+\) does not answer: the start of "touch \S+" got no answer within 1 s/, 1000 + 1000 + 1500);
      assert.match(s.pi.status(), /blocked \(unresponsive/);
      await s.pi.command("krunbox", "restart");
      assert.match(s.pi.status(), /ready/);
      assert.notEqual(serverOf(s).pid, first.pid, "a new krunbox serve");
      assert.equal(first.closed, true, "the stopped one was killed");
    } finally {
      // It was killed: SIGCONT is for when the restart failed.
      try {
        process.kill(first.pid as number, "SIGCONT");
      } catch {
        // gone
      }
    }
    assert.equal(existsSync(marker), false, "the command that timed out never ran");
    assert.match((await s.pi.call("bash", { command: "echo back" })).text, /back/);
    await shutdown(s);
  });

  test("a stopped VM: the call fails within the deadlines with the server's reason, SIGCONT recovers", { timeout: 60_000, skip: IS_STANDIN && "SKIP: the stand-in has no VM processes (make pi-test runs this against build/krunbox)" }, async () => {
    const s = await setup({ user: deadlines(4) });
    await ready(s);
    writeFileSync(path.join(s.ws, "f.txt"), "before\n");
    const pids = vmProcesses(s.home, sandboxName(s.ws));
    assert.ok(pids.length >= 2, `the runner and the guest: ${pids}`);
    await stopProcesses(pids);
    try {
      const why = /the VM does not answer: /;
      await assertCallFails(s, "read", { path: "f.txt" }, why, 1000 + 4000 + 1500);
      await assertBlocked(s, why);
    } finally {
      signalAll(pids, "SIGCONT");
    }
    await eventually(() => /ready/.test(s.pi.status()), "recovery after SIGCONT", 15_000);
    assert.match((await s.pi.call("read", { path: "f.txt" })).text, /before/);
    assert.match((await s.pi.call("bash", { command: "echo again" })).text, /again/);
    await shutdown(s);
  });
});

describe("routing into the sandbox", () => {
  test("the seven tools and !cmd run in the sandbox", async () => {
    const s = await setup({ user: `env_passthrough = ["PASSED"]\n[env]\nFROM_CONFIG = "cfg"\n`, env: { PASSED: "yes" } });
    await ready(s);
    const call = async (tool: string, input: Record<string, unknown>) => {
      const r = await s.pi.call(tool, input);
      assert.equal(r.blocked, undefined, `${tool} blocked: ${r.blocked}`);
      return r;
    };
    const f = path.join(s.ws, "dir", "f.txt");
    assert.equal((await call("write", { path: f, content: "one\ntwo\n" })).isError, false);
    assert.equal(readFileSync(f, "utf8"), "one\ntwo\n", "a workspace write reaches the host");
    const outside = `/root/krunbox-ext-${path.basename(path.dirname(s.ws))}`;
    assert.equal((await call("write", { path: outside, content: "vm only" })).isError, false);
    assert.equal(existsSync(outside), false, "a write outside the workspace stays in the sandbox");
    assert.match((await call("read", { path: outside })).text, /vm only/);
    assert.match((await call("read", { path: "dir/f.txt" })).text, /one\ntwo/);
    assert.equal((await call("edit", { path: f, edits: [{ oldText: "two", newText: "deux" }] })).isError, false);
    assert.equal(readFileSync(f, "utf8"), "one\ndeux\n");
    assert.match((await call("ls", { path: "." })).text, /^dir\/$/m);
    assert.match((await call("find", { pattern: "*.txt" })).text, /dir\/f\.txt/);
    assert.match((await call("grep", { pattern: "deux" })).text, /dir\/f\.txt:2: deux/);
    const bash = await call("bash", { command: 'echo "host=$HOSTNAME uname=$(hostname) secret=${HOST_SECRET:-unset} passed=$PASSED cfg=$FROM_CONFIG session=${PI_SESSION_ID:-unset}"; pwd' });
    assert.match(bash.text, /secret=unset passed=yes cfg=cfg session=unset/);
    assert.ok(bash.text.includes(s.ws), "bash runs in the workspace");
    // The stand-in only sets HOSTNAME; a VM's own hostname is the sandbox's name.
    assert.match(bash.text, IS_STANDIN ? /host=pi-ws-[0-9a-f]{8} / : new RegExp(`uname=${sandboxName(s.ws)} `));
    const ub = await s.pi.emit("user_bash", { command: "echo from-bang", cwd: s.ws, excludeFromContext: false });
    let out = "";
    const res = await ub.operations.exec("echo from-bang; echo ${HOST_SECRET:-unset}", s.ws, { onData: (d: Buffer) => (out += d) });
    assert.equal(res.exitCode, 0);
    assert.equal(out, "from-bang\nunset\n");
    await shutdown(s);
  });

  test("bash: exit codes, timeout and abort", async () => {
    const s = await setup();
    await ready(s);
    const failed = await s.pi.call("bash", { command: "echo partial; exit 3" });
    assert.equal(failed.isError, true);
    assert.match(failed.text, /partial[\s\S]*Command exited with code 3/);
    const timedOut = await s.pi.call("bash", { command: "sleep 20", timeout: 0.5 });
    assert.match(timedOut.text, /Command timed out after 0\.5 seconds/);
    const ac = new AbortController();
    const pidFile = path.join(s.ws, "abort.pid");
    const aborted = s.pi.call("bash", { command: `sleep 30 & echo $! > ${pidFile}; wait` }, ac.signal);
    await eventually(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the command to start");
    ac.abort();
    assert.match((await aborted).text, /Command aborted/);
    const pid = readFileSync(pidFile, "utf8").trim();
    await eventually(async () => /dead/.test((await s.pi.call("bash", { command: `kill -0 ${pid} 2>/dev/null && echo alive || echo dead` })).text), "the group to die");
    await shutdown(s);
  });

  test("a tool call that comes while the sandbox starts waits for it", async () => {
    const s = await setup({ env: { KRUNBOX_STANDIN_BOOT_MS: "1500" } });
    assert.match(s.pi.status(), /starting/);
    const t0 = Date.now();
    const r = await s.pi.call("bash", { command: "echo waited" });
    assert.equal(r.blocked, undefined);
    assert.match(r.text, /waited/);
    if (IS_STANDIN) assert.ok(Date.now() - t0 >= 1000, "it waited for the start");
    await shutdown(s);
  });

  test("a start slower than start_timeout_sec blocks the call with that reason (stand-in: its boot delay)", async () => {
    const s = await setup({ user: "start_timeout_sec = 1\n", bin: STANDIN, env: { KRUNBOX_STANDIN_BOOT_MS: "4000" } });
    const r = await s.pi.call("bash", { command: "true" });
    assert.match(r.blocked ?? "", /still starting/);
    await shutdown(s);
  });

  test("a sandbox stopped by its idle timeout starts again at the next call", async () => {
    const s = await setup({ user: "idle_timeout_sec = 1\n" });
    await ready(s);
    await eventually(() => /stopped/.test(s.pi.status()), "the idle stop", 10_000);
    const r = await s.pi.call("bash", { command: "echo again" });
    assert.match(r.text, /again/);
    assert.match(s.pi.status(), /ready/);
    await shutdown(s);
  });

  test("a dead krunbox serve fails the call in flight, and is started again at the next call", async () => {
    const s = await setup();
    await ready(s);
    const started = path.join(s.ws, "started");
    const inFlight = s.pi.call("bash", { command: `touch ${started}; sleep 10` });
    await eventually(() => existsSync(started), "the command to start");
    process.kill(serverOf(s).pid as number, "SIGKILL");
    const failed = await inFlight;
    assert.equal(failed.isError, true);
    assert.match(failed.text, /krunbox serve was killed by SIGKILL/);
    await eventually(() => /stopped/.test(s.pi.status()), "stopped after the crash");
    const r = await s.pi.call("bash", { command: "echo back" });
    assert.equal(r.blocked, undefined, "the gate starts a new server");
    assert.match(r.text, /back/);
    await shutdown(s);
  });

  test("a session that ends while its krunbox serve starts leaves no server behind", async () => {
    const s = await setup();
    await shutdown(s); // session_start only spawned the server: it has not answered initialize yet
    try {
      await eventually(() => serveProcesses(s.home).length === 0, "the server to exit");
    } finally {
      for (const pid of serveProcesses(s.home)) process.kill(pid, "SIGKILL"); // a leaked one would keep this test process alive
    }
    assert.equal(s.pi.statuses.some((t) => /ready/.test(t)), false, "the ended session did not come up");
  });

  test("the system prompt says where tools run", async () => {
    const s = await setup();
    await ready(s);
    const r = await s.pi.emit("before_agent_start", { systemPrompt: "BASE", prompt: "x" });
    assert.match(r.systemPrompt, /^BASE\n\n# Sandbox\n/);
    assert.ok(r.systemPrompt.includes(`The project directory ${s.ws} is mounted at the same path`));
    await s.pi.command("krunbox", "off");
    assert.equal(await s.pi.emit("before_agent_start", { systemPrompt: "BASE", prompt: "x" }), undefined);
    await shutdown(s);
  });
});

describe("host execution only when asked, always labelled", () => {
  test("/krunbox off runs on the host, labelled; /krunbox on goes back", async () => {
    const s = await setup();
    await ready(s);
    await s.pi.command("krunbox", "off");
    assert.match(s.pi.status(), /^krunbox: HOST \(\/krunbox off\)/);
    assert.ok(s.pi.notes.some((n) => n.level === "warning" && /HOST/.test(n.message)));
    const marker = path.join(s.ws, "host-marker");
    const r = await s.pi.call("bash", { command: `echo on-host > ${marker}; echo pid=$$` });
    assert.match(r.text, /^\[krunbox\] ran on the HOST, not in the sandbox \(\/krunbox off\)\n/);
    assert.equal(readFileSync(marker, "utf8"), "on-host\n");
    const w = await s.pi.call("write", { path: path.join(s.ws, "hw.txt"), content: "x" });
    assert.match(w.text, /^\[krunbox\] ran on the HOST/);
    let out = "";
    const ub = await s.pi.emit("user_bash", { command: "echo bang", cwd: s.ws, excludeFromContext: false });
    await ub.operations.exec("echo bang", s.ws, { onData: (d: Buffer) => (out += d) });
    assert.match(out, /^\[krunbox\] ran on the HOST.*\nbang\n$/);
    await s.pi.command("krunbox", "on");
    assert.match(s.pi.status(), /ready/);
    const back = await s.pi.call("bash", { command: "echo ${HOST_SECRET:-unset}" });
    assert.match(back.text, /^unset/);
    await shutdown(s);
  });

  test('fallback = "host" in the user file: a failed start runs tools on the host, labelled', async () => {
    const s = await setup({ user: `fallback = "host"\n`, env: { KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" } });
    await eventually(() => /HOST/.test(s.pi.status()), "host fallback");
    assert.match(s.pi.status(), /HOST \(fallback = "host" .* because .*libkrun/);
    const r = await s.pi.call("bash", { command: "echo fell-back" });
    assert.match(r.text, /^\[krunbox\] ran on the HOST, not in the sandbox \(fallback/);
    assert.match(r.text, /fell-back/);
    await shutdown(s);
  });

  test("an untrusted project cannot turn on the host fallback; one pi decided to trust can", async () => {
    const project = `fallback = "host"\n`;
    const env = { KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" };
    const cases: [string, Parameters<typeof setup>[0], RegExp][] = [
      ["pi says no", { trust: false }, /blocked/],
      ["pi 0.73 (no trust at all)", {}, /blocked/],
      ["pi trusts by default only", { trust: true }, /blocked/],
      ["pi trusts after deciding on its own .pi resources", { trust: true, piSettings: true }, /HOST/],
      ["pi trusts with --approve", { trust: true, argv: ["node", "pi", "--approve"] }, /HOST/],
      // The project file is the workspace's (the git root); pi's trust is about its cwd.
      ["pi trusts a subdirectory after deciding on its own .pi resources", { trust: true, cwd: "pkg", piSettings: true }, /blocked/],
      ["pi trusts a subdirectory with --approve", { trust: true, cwd: "pkg", argv: ["node", "pi", "--approve"] }, /blocked/],
    ];
    for (const [label, opts, want] of cases) {
      const s = await setup({ project, env, ...opts });
      await eventually(() => want.test(s.pi.status()), `${label}: ${want}, status ${s.pi.status()}`);
      const refused = s.pi.notes.some((n) => /fallback = "host" would run tools on the host: refused/.test(n.message));
      assert.equal(refused, /blocked/.test(want.source), label);
      await shutdown(s);
    }
  });

  test("--krunbox-off starts on the host", async () => {
    const s = await setup({ start: false });
    s.pi.flags.set("krunbox-off", true);
    await s.pi.emit("session_start", { reason: "startup" });
    assert.match(s.pi.status(), /HOST \(enabled = false \(flag --krunbox-off\)\)/);
    assert.match((await s.pi.call("bash", { command: "echo x" })).text, /^\[krunbox\] ran on the HOST/);
  });
});

describe("/krunbox", () => {
  test("network allow|deny changes the running sandbox's rules", async () => {
    const s = await setup({ user: `network = "allow=a.test"\n` });
    await ready(s);
    const last = () => s.pi.notes[s.pi.notes.length - 1]?.message ?? "";
    await s.pi.command("krunbox", "network allow b.test:443");
    assert.match(last(), /^krunbox: network is now allow=a\.test,b\.test:443$/);
    await s.pi.command("krunbox", "network deny a.test");
    assert.match(last(), /^krunbox: network is now allow=b\.test:443$/);
    await s.pi.command("krunbox", "network open");
    assert.match(last(), /usage: \/krunbox network allow\|deny RULE/);
    await s.pi.command("krunbox", "network allow bad,rule");
    assert.match(last(), /^krunbox: network allow: /);
    await shutdown(s);
  });

  test("status, config, logs, restart", async () => {
    const s = await setup({ user: "cpus = 1\n" });
    await ready(s);
    await s.pi.command("krunbox", "status");
    const status = s.pi.notes[s.pi.notes.length - 1]?.message ?? "";
    assert.match(status, /^krunbox: ready \(/);
    assert.match(status, /sandbox: pi-ws-[0-9a-f]{8}/);
    assert.match(status, /^krunbox: \/.* \(from KRUNBOX_BIN\)$/m);
    assert.match(status, /server says: ready/);
    await s.pi.command("krunbox", "config");
    assert.match(s.pi.notes[s.pi.notes.length - 1]?.message ?? "", /^cpus = 1 {2}\(user /m);
    await s.pi.command("krunbox", "logs");
    assert.match(s.pi.notes[s.pi.notes.length - 1]?.message ?? "", /--- console of pi-ws-[\s\S]*--- krunbox serve log/);
    writeFileSync(path.join(s.ws, "kept"), "k");
    await s.pi.call("write", { path: "/root/gone-after-recreate", content: "x" });
    await s.pi.command("krunbox", "restart");
    assert.match(s.pi.status(), /ready/);
    assert.match((await s.pi.call("read", { path: "/root/gone-after-recreate" })).text, /ENOENT/, "restart recreates the sandbox");
    assert.equal(readFileSync(path.join(s.ws, "kept"), "utf8"), "k", "the workspace is the host's and stays");
    await s.pi.command("krunbox", "bogus");
    assert.match(s.pi.notes[s.pi.notes.length - 1]?.message ?? "", /unknown subcommand "bogus"/);
    await shutdown(s);
  });

  test("pi 0.73 in rpc mode: a warning, once, that the rpc client's bash commands run on the host", async () => {
    const rpc = ["node", "pi", "-e", "pi-krunbox", "--mode", "rpc"];
    const cases: [string, object, string[], boolean][] = [
      ["0.73, --mode rpc", {}, rpc, true],
      ["0.73, --mode=rpc", {}, ["node", "pi", "--mode=rpc"], true],
      ["0.73, print mode", {}, ["node", "pi", "-p", "x"], false],
      ["0.73, a prompt that says --mode rpc is not the flag", {}, ["node", "pi", "-p", "--mode"], false],
      ["1.x (ctx.mode)", { mode: "rpc" }, rpc, false],
      ["1.x (ctx.isProjectTrusted)", { isProjectTrusted: () => true }, rpc, false],
    ];
    for (const [label, ctx, argv, want] of cases) assert.equal(rpcBashBypasses(ctx, argv), want, label);
    for (const [label, opts, want] of [
      ["0.73 rpc", { argv: rpc }, 1],
      ["1.x rpc", { argv: rpc, trust: true }, 0],
      ["0.73 tui", {}, 0],
    ] as const) {
      const s = await setup({ ...opts, argv: [...(opts.argv ?? ["node", "pi"])] });
      await s.pi.emit("session_start", { reason: "startup" });
      const warned = s.pi.notes.filter((n) => n.message === RPC_BASH_WARNING);
      assert.equal(warned.length, want, label);
      if (want) assert.equal(warned[0]?.level, "warning");
      await shutdown(s);
    }
  });

  test("the session says once which krunbox it uses, and why that one", async () => {
    const s = await setup();
    const using = () => s.pi.notes.filter((n) => /^krunbox: using /.test(n.message));
    assert.deepEqual(using(), [{ message: `krunbox: using ${s.env.KRUNBOX_BIN} (from KRUNBOX_BIN)`, level: "info" }], "at session start");
    await ready(s);
    await s.pi.command("krunbox", "restart");
    await s.pi.command("krunbox", "off");
    await s.pi.command("krunbox", "on");
    assert.equal(using().length, 1, "once");
    await shutdown(s);
  });

  test("stop_on_exit stops the sandbox when the session ends; the default keeps it", async () => {
    for (const [user, want] of [["", "ready"], ["stop_on_exit = true\n", "stopped"]] as const) {
      const s = await setup({ user });
      await ready(s);
      await shutdown(s);
      const c = await ServeClient.connect({ bin: s.env.KRUNBOX_BIN as string, env: s.env }, { name: "t", version: "0" });
      try {
        const st = await c.request<{ state: string }>("sandbox.status", { name: sandboxName(s.ws) });
        assert.equal(st.state, want, user || "default");
      } finally {
        await c.close();
      }
    }
  });
});
