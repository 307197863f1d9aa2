// Conformance of a `krunbox serve --stdio` server to docs/serve-protocol.md. Runs against
// the stand-in by default; KRUNBOX_SERVE_BIN=/path/to/krunbox runs the same suite against
// another server (serve-driver.ts says how). Commands used in the guest are POSIX sh and
// busybox applets only, and command-made files stay in the workspace (the stand-in runs
// commands on the host).

import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { ErrorCode, type ExecExitParams, type SandboxStatus } from "../src/protocol.ts";
import type { ServeClient } from "../src/rpc.ts";
import { eventually, IMAGE, IS_STANDIN, RawServer, rpcRejection, SERVE_BIN, ServeEnv, withServer } from "./serve-driver.ts";

async function run(c: ServeClient, sandbox: string, script: string, extra: object = {}) {
  let stdout = "";
  let stderr = "";
  const exit = await c.exec(
    { sandbox, argv: ["/bin/sh", "-c", script], ...extra },
    { onOutput: (s, d) => (s === "stdout" ? (stdout += d) : (stderr += d)) },
  );
  return { stdout, stderr, exit };
}

describe(`serve protocol conformance (${IS_STANDIN ? "stand-in" : SERVE_BIN})`, () => {
  const env = new ServeEnv({ SERVE_SECRET: "from-the-server-env" });
  const name = env.name("main");
  let c: ServeClient;
  let ready: SandboxStatus;

  before(async () => {
    c = await env.connect();
    ready = await c.request<SandboxStatus>("sandbox.ensure", env.ensureParams(name, { env: { SANDBOX_VAR: "sb", OVERRIDE: "sandbox" } }));
  });
  after(async () => {
    await c?.request("sandbox.stop", { name, remove: true }).catch(() => {});
    await c?.close();
    await env.cleanup();
  });

  test("initialize reports version 1 and limits", () => {
    assert.equal(c.info?.protocolVersion, 1);
    assert.ok(c.info?.server.name);
    assert.ok((c.info?.limits.maxReadBytes ?? 0) > 0);
    assert.ok((c.info?.limits.maxWriteBytes ?? 0) > 0);
  });

  test("sandbox.ensure creates, then reuses", async () => {
    assert.equal(ready.state, "ready");
    assert.equal(ready.name, name);
    assert.equal(ready.workspace, env.workspace);
    assert.equal(ready.created, true);
    const again = await c.request<SandboxStatus>("sandbox.ensure", env.ensureParams(name, { env: { SANDBOX_VAR: "sb", OVERRIDE: "sandbox" } }));
    assert.equal(again.state, "ready");
    assert.equal(again.created, false);
    assert.deepEqual(again.configChanged, []);
  });

  test("sandbox.ensure reports non-reach changes and refuses reach changes", async () => {
    const changed = await c.request<SandboxStatus>("sandbox.ensure", env.ensureParams(name, { cpus: 1, env: { SANDBOX_VAR: "sb", OVERRIDE: "sandbox" } }));
    assert.deepEqual(changed.configChanged, ["cpus"]);
    const err = await rpcRejection(c.request("sandbox.ensure", env.ensureParams(name, { network: "none", env: { SANDBOX_VAR: "sb", OVERRIDE: "sandbox" } })));
    assert.equal(err.code, ErrorCode.ConfigMismatch);
    assert.deepEqual(err.data?.keys, ["network"]);
    const st = await c.request<SandboxStatus>("sandbox.status", { name });
    assert.equal(st.state, "ready", "a refused ensure must not touch the sandbox");
  });

  test("sandbox.ensure validates", async () => {
    assert.equal((await rpcRejection(c.request("sandbox.ensure", { name: "Bad_Name", workspace: env.workspace, config: { image: IMAGE } }))).code, ErrorCode.InvalidParams);
    assert.equal((await rpcRejection(c.request("sandbox.ensure", { name: "t-rel", workspace: "relative/ws", config: { image: IMAGE } }))).code, ErrorCode.InvalidParams);
    assert.equal((await rpcRejection(c.request("sandbox.ensure", env.ensureParams("t-net", { network: "wide" })))).code, ErrorCode.InvalidConfig);
    assert.equal((await rpcRejection(c.request("sandbox.ensure", env.ensureParams("t-cpu", { cpus: 0 })))).code, ErrorCode.InvalidConfig);
    assert.equal(
      (await rpcRejection(c.request("sandbox.ensure", env.ensureParams("t-mnt", { mounts: [{ host: env.home, guest: "/proc" }] })))).code,
      ErrorCode.InvalidConfig,
    );
    assert.equal(
      (await rpcRejection(c.request("sandbox.ensure", { name: "t-nows", workspace: path.join(env.root, "missing"), config: { image: IMAGE, imageTrusted: true } }))).code,
      ErrorCode.InvalidConfig,
    );
  });

  test("sandbox.ensure takes a local image only from the user, and only by an absolute path", async () => {
    const layout = path.join(env.workspace, "img");
    for (const [what, config] of [
      ["an oci layout not marked as the user's", { image: `oci:${layout}:latest`, imageTrusted: undefined }],
      ["a docker archive not marked as the user's", { image: `docker-archive:${layout}.tar`, imageTrusted: false }],
      ["a relative oci layout", { image: "oci:img:latest", imageTrusted: true }],
      ["a relative docker archive", { image: "docker-archive:./img.tar", imageTrusted: true }],
    ] as const) {
      const err = await rpcRejection(c.request("sandbox.ensure", env.ensureParams("t-local", config)));
      assert.equal(err.code, ErrorCode.InvalidConfig, `${what}: ${err.message}`);
      assert.match(err.message, /config\.image/, what);
    }
    const st = await c.request<SandboxStatus>("sandbox.status", { name: "t-local" });
    assert.equal(st.state, "absent", "a refused image must not create the sandbox");
  });

  test("sandbox.status of an absent sandbox is absent, not an error", async () => {
    const st = await c.request<SandboxStatus>("sandbox.status", { name: "t-never-created" });
    assert.equal(st.state, "absent");
  });

  test("exec streams stdout and stderr and reports the exit code", async () => {
    const r = await run(c, name, "echo out; echo err >&2; exit 3");
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    assert.deepEqual({ code: r.exit.exitCode, sig: r.exit.signal, to: r.exit.timedOut }, { code: 3, sig: null, to: false });
  });

  test("exec runs in the workspace by default and in cwd when given", async () => {
    assert.equal((await run(c, name, "pwd")).stdout.trim(), env.workspace);
    const sub = path.join(env.workspace, "sub dir");
    await c.request("fs.mkdirAll", { sandbox: name, path: sub });
    assert.equal((await run(c, name, "pwd", { cwd: sub })).stdout.trim(), sub);
  });

  test("exec environment: image < sandbox < call, nothing from the server", async () => {
    const r = await run(c, name, 'echo "p=${PATH:+set} sb=$SANDBOX_VAR o=$OVERRIDE call=$CALL_VAR secret=${SERVE_SECRET:-unset}"', {
      env: { CALL_VAR: "c", OVERRIDE: "call" },
    });
    assert.equal(r.stdout.trim(), "p=set sb=sb o=call call=c secret=unset");
  });

  test("exec passes stdin and closes it", async () => {
    const r = await run(c, name, "cat; echo done", { stdin: Buffer.from("in\n").toString("base64") });
    assert.equal(r.stdout, "in\ndone\n");
    const empty = await run(c, name, "cat; echo eof");
    assert.equal(empty.stdout, "eof\n");
  });

  test("exec output of a megabyte arrives whole and in order", async () => {
    const r = await run(c, name, "i=0; while [ $i -lt 20000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done");
    const lines = r.stdout.trimEnd().split("\n");
    assert.equal(lines.length, 20000);
    assert.equal(lines[19999], "line-19999-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    assert.ok(lines.every((l, i) => l.startsWith(`line-${i}-`)));
  });

  test("exec that cannot start is exec-failed, distinct from exit 127", async () => {
    const err = await rpcRejection(c.exec({ sandbox: name, argv: ["krunbox-no-such-command"] }));
    assert.equal(err.code, ErrorCode.ExecFailed);
    assert.equal(err.data?.reason, "not-found");
    const cwd = await rpcRejection(c.exec({ sandbox: name, argv: ["/bin/sh", "-c", "true"], cwd: "/krunbox/no/such/dir" }));
    assert.equal(cwd.code, ErrorCode.ExecFailed);
    assert.equal(cwd.data?.reason, "cwd");
    const ran = await run(c, name, "krunbox-no-such-command");
    assert.equal(ran.exit.exitCode, 127, "a shell that ran and could not find the command exits 127");
  });

  test("exec timeout kills the group and says timedOut", async () => {
    const t0 = Date.now();
    const r = await run(c, name, "sleep 30", { timeoutMs: 300 });
    assert.equal(r.exit.timedOut, true);
    assert.equal(r.exit.signal, "SIGKILL");
    assert.equal(r.exit.exitCode, null);
    assert.ok(Date.now() - t0 < 10_000);
  });

  test("exec.signal SIGKILL kills the whole process group", async () => {
    const pidFile = path.join(env.workspace, "bg.pid");
    const ac = new AbortController();
    let started = false;
    const done = c.exec(
      { sandbox: name, argv: ["/bin/sh", "-c", `sleep 300 & echo $! > ${pidFile}; wait`] },
      { signal: ac.signal, onStart: () => (started = true) },
    );
    // Aborted once exec.start has been answered: an abort before that gives up on the
    // start (and kills the command if it starts late), which is not what is tested here.
    await eventually(() => started && existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the background pid");
    const bg = readFileSync(pidFile, "utf8").trim();
    ac.abort();
    const exit: ExecExitParams = await done;
    assert.equal(exit.signal, "SIGKILL");
    await eventually(async () => (await run(c, name, `kill -0 ${bg} 2>/dev/null && echo alive || echo dead`)).stdout.trim() === "dead", "the background sleep to die");
  });

  test("exec.signal on an exited or unknown exec is not delivered", async () => {
    const r = await c.request<{ delivered: boolean }>("exec.signal", { execId: "never-started", signal: "SIGTERM" });
    assert.equal(r.delivered, false);
    const bad = await rpcRejection(c.request("exec.signal", { execId: "x", signal: "SIGBOGUS" }));
    assert.equal(bad.code, ErrorCode.InvalidParams);
  });

  test("exec.signal delivers other signals to the group", async () => {
    let execId = "";
    let stdout = "";
    const done = c.exec(
      { sandbox: name, argv: ["/bin/sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done"] },
      { onStart: (id) => (execId = id), onOutput: (_s, d) => (stdout += d) },
    );
    await eventually(() => stdout.includes("ready"), "the trap to be set");
    const sent = await c.request<{ delivered: boolean }>("exec.signal", { execId, signal: "SIGTERM" });
    assert.equal(sent.delivered, true);
    const exit = await done;
    assert.match(stdout, /got-term/);
    assert.equal(exit.exitCode, 7);
  });

  test("fs.writeFile then fs.readFile, with mkdirs, offsets and sizes", async () => {
    const p = path.join(env.workspace, "d1", "d2", "f.txt");
    const missing = await rpcRejection(c.request("fs.writeFile", { sandbox: name, path: p, data: Buffer.from("x").toString("base64") }));
    assert.equal(missing.code, ErrorCode.NotFound);
    await c.request("fs.writeFile", { sandbox: name, path: p, data: Buffer.from("hello world").toString("base64"), mkdirs: true });
    assert.equal(readFileSync(p, "utf8"), "hello world", "a workspace write is on the host at the same path");
    const all = await c.request<{ data: string; size: number; eof: boolean }>("fs.readFile", { sandbox: name, path: p });
    assert.deepEqual({ ...all, data: Buffer.from(all.data, "base64").toString() }, { data: "hello world", size: 11, eof: true });
    const part = await c.request<{ data: string; size: number; eof: boolean }>("fs.readFile", { sandbox: name, path: p, offset: 6, length: 3 });
    assert.deepEqual({ ...part, data: Buffer.from(part.data, "base64").toString() }, { data: "wor", size: 11, eof: false });
  });

  test("fs.writeFile replaces atomically and keeps the mode of an existing file", async () => {
    const p = path.join(env.workspace, "mode.sh");
    writeFileSync(p, "old", { mode: 0o755 });
    await c.request("fs.writeFile", { sandbox: name, path: p, data: Buffer.from("new").toString("base64") });
    assert.equal(readFileSync(p, "utf8"), "new");
    const st = await c.request<{ mode: number; type: string; size: number }>("fs.stat", { sandbox: name, path: p });
    assert.equal(st.mode & 0o777, 0o755);
    assert.equal(st.type, "file");
    assert.equal(st.size, 3);
  });

  test("files outside the workspace are the sandbox's, not the host's", async () => {
    const p = `/root/krunbox-conformance-${path.basename(env.root)}`;
    await c.request("fs.writeFile", { sandbox: name, path: p, data: Buffer.from("vm").toString("base64") });
    assert.equal(existsSync(p), false, `${p} must not appear on the host`);
    const back = await c.request<{ data: string }>("fs.readFile", { sandbox: name, path: p });
    assert.equal(Buffer.from(back.data, "base64").toString(), "vm");
  });

  test("fs errors have their codes", async () => {
    const ws = env.workspace;
    writeFileSync(path.join(ws, "plain"), "x");
    const cases: [string, object, number][] = [
      ["fs.readFile", { path: path.join(ws, "nope") }, ErrorCode.NotFound],
      ["fs.readFile", { path: ws }, ErrorCode.IsDir],
      ["fs.stat", { path: path.join(ws, "nope") }, ErrorCode.NotFound],
      ["fs.readDir", { path: path.join(ws, "plain") }, ErrorCode.NotDir],
      ["fs.mkdirAll", { path: path.join(ws, "plain", "sub") }, ErrorCode.NotDir],
      ["fs.writeFile", { path: ws, data: "" }, ErrorCode.IsDir],
    ];
    for (const [method, params, code] of cases) {
      const err = await rpcRejection(c.request(method, { sandbox: name, ...params }));
      assert.equal(err.code, code, `${method} ${JSON.stringify(params)}: ${err.message}`);
    }
  });

  test("fs.readDir lists names with lstat types; fs.stat follows links unless lstat", async () => {
    const d = path.join(env.workspace, "listing");
    await c.request("fs.mkdirAll", { sandbox: name, path: path.join(d, "sub") });
    await c.request("fs.mkdirAll", { sandbox: name, path: path.join(d, "sub") });
    writeFileSync(path.join(d, "file"), "1");
    await run(c, name, `ln -s sub ${path.join(d, "link")}`);
    const { entries } = await c.request<{ entries: { name: string; type: string }[] }>("fs.readDir", { sandbox: name, path: d });
    assert.deepEqual(
      entries.sort((a, b) => a.name.localeCompare(b.name)),
      [
        { name: "file", type: "file" },
        { name: "link", type: "symlink" },
        { name: "sub", type: "dir" },
      ],
    );
    assert.equal((await c.request<{ type: string }>("fs.stat", { sandbox: name, path: path.join(d, "link") })).type, "dir");
    assert.equal((await c.request<{ type: string }>("fs.stat", { sandbox: name, path: path.join(d, "link"), lstat: true })).type, "symlink");
  });

  test("fs.readFile over the read limit is too-large", async () => {
    const max = c.info?.limits.maxReadBytes ?? 0;
    const err = await rpcRejection(c.request("fs.readFile", { sandbox: name, path: path.join(env.workspace, "plain"), length: max + 1 }));
    assert.equal(err.code, ErrorCode.TooLarge);
  });

  test("calls on a sandbox that is not running are not-ready", async () => {
    const err = await rpcRejection(c.request("fs.stat", { sandbox: "t-absent-sandbox", path: "/" }));
    assert.equal(err.code, ErrorCode.NotReady);
    const ex = await rpcRejection(c.exec({ sandbox: "t-absent-sandbox", argv: ["true"] }));
    assert.equal(ex.code, ErrorCode.NotReady);
  });

  test("sandbox.logs returns the console tail", async () => {
    const r = await c.request<{ text: string; truncated: boolean }>("sandbox.logs", { name, maxBytes: 4096 });
    assert.equal(typeof r.text, "string");
    assert.ok(r.text.length <= 4096);
    const absent = await c.request<{ text: string; truncated: boolean }>("sandbox.logs", { name: "t-absent-sandbox" });
    assert.deepEqual(absent, { text: "", truncated: false });
  });
});

describe("serve protocol lifecycle", () => {
  test("stop, ensure again, restart with recreate", () =>
    withServer({}, async (c, env) => {
      const name = env.name("life");
      await c.request("sandbox.ensure", env.ensureParams(name));
      await c.request("fs.writeFile", { sandbox: name, path: "/root/keep", data: Buffer.from("k").toString("base64") });
      const stopped = await c.request<SandboxStatus>("sandbox.stop", { name });
      assert.equal(stopped.state, "stopped");
      assert.equal((await rpcRejection(c.request("fs.stat", { sandbox: name, path: "/root/keep" }))).code, ErrorCode.NotReady);
      const again = await c.request<SandboxStatus>("sandbox.ensure", env.ensureParams(name));
      assert.equal(again.created, false);
      assert.equal((await c.request<{ type: string }>("fs.stat", { sandbox: name, path: "/root/keep" })).type, "file", "rootfs changes survive stop/start");
      const fresh = await c.request<SandboxStatus>("sandbox.restart", { ...env.ensureParams(name, { network: "none" }), recreate: true });
      assert.equal(fresh.state, "ready");
      assert.equal(fresh.created, true);
      assert.equal((await rpcRejection(c.request("fs.stat", { sandbox: name, path: "/root/keep" }))).code, ErrorCode.NotFound, "recreate starts from the image");
      const removed = await c.request<SandboxStatus>("sandbox.stop", { name, remove: true });
      assert.equal(removed.state, "absent");
      assert.equal((await c.request<SandboxStatus>("sandbox.status", { name })).state, "absent");
    }));

  test("closing stdin kills the connection's commands but keeps the sandbox", async () => {
    const env = new ServeEnv();
    const name = env.name("eof");
    const c1 = await env.connect();
    await c1.request("sandbox.ensure", env.ensureParams(name));
    const pidFile = path.join(env.workspace, "eof.pid");
    const running = c1.exec({ sandbox: name, argv: ["/bin/sh", "-c", `echo $$ > ${pidFile}; exec sleep 300`] });
    running.catch(() => {});
    await eventually(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", "the command's pid");
    const pid = readFileSync(pidFile, "utf8").trim();
    await c1.close();
    const c2 = await env.connect();
    try {
      assert.equal((await c2.request<SandboxStatus>("sandbox.status", { name })).state, "ready", "the sandbox outlives the connection");
      await eventually(async () => (await run(c2, name, `kill -0 ${pid} 2>/dev/null && echo alive || echo dead`)).stdout.trim() === "dead", "the command to be killed");
    } finally {
      await c2.request("sandbox.stop", { name, remove: true }).catch(() => {});
      await c2.close();
      await env.cleanup();
    }
  });

  test("a missing libkrun fails the start with a reason and a hint", () =>
    withServer({ KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" }, async (c, env) => {
      const err = await rpcRejection(c.request("sandbox.ensure", env.ensureParams(env.name("nolib"))));
      assert.equal(err.code, ErrorCode.StartFailed);
      assert.match(err.message, /libkrun/);
      assert.ok(err.hint, "start-failed carries a hint");
    }));
});

describe("serve protocol framing", () => {
  test("initialize first; bad lines get errors and the server keeps serving", async () => {
    const env = new ServeEnv();
    const s = new RawServer(env.command());
    try {
      s.send(1, "sandbox.status", { name: "x" });
      assert.equal(((await s.response(1)).error as { code: number }).code, ErrorCode.NotInitialized);
      s.send(2, "initialize", { protocolVersion: 99, client: { name: "t", version: "0" } });
      const unsupported = (await s.response(2)).error as { code: number; data: { supported: number[] } };
      assert.equal(unsupported.code, ErrorCode.UnsupportedVersion);
      assert.deepEqual(unsupported.data.supported, [1]);
      s.send(3, "initialize", { protocolVersion: 1, client: { name: "t", version: "0" } });
      assert.ok((await s.response(3)).result);
      s.write("this is not json");
      await s.waitFor((m) => m.id === null && (m.error as { code: number })?.code === ErrorCode.ParseError, "parse error");
      s.write("[1,2]");
      await s.waitFor((m) => m.id === null && (m.error as { code: number })?.code === ErrorCode.InvalidRequest, "invalid request");
      s.send(4, "no.such.method");
      assert.equal(((await s.response(4)).error as { code: number }).code, ErrorCode.MethodNotFound);
      s.send(5, "sandbox.status", { name: "t-still-serving" });
      assert.equal(((await s.response(5)).result as { state: string }).state, "absent");
    } finally {
      s.end();
      assert.equal(await s.exited, 0, "EOF on stdin makes the server exit 0");
      await env.cleanup();
    }
  });

  test("the exec.start response comes before the exec's notifications", async () => {
    const env = new ServeEnv();
    const s = new RawServer(env.command());
    const name = env.name("order");
    try {
      s.send(1, "initialize", { protocolVersion: 1, client: { name: "t", version: "0" } });
      await s.response(1);
      s.send(2, "sandbox.ensure", env.ensureParams(name));
      await s.response(2, 120_000);
      s.send(3, "exec.start", { sandbox: name, execId: "e1", argv: ["/bin/sh", "-c", "echo quick"] });
      const exit = await s.waitFor((m) => m.method === "exec.exit", "exec.exit");
      const iResp = s.messages.findIndex((m) => m.id === 3);
      const iOut = s.messages.findIndex((m) => m.method === "exec.output");
      const iExit = s.messages.indexOf(exit);
      assert.ok(iResp >= 0 && iOut > iResp && iExit > iOut, `order: response ${iResp}, output ${iOut}, exit ${iExit}`);
      s.send(4, "sandbox.stop", { name, remove: true });
      await s.response(4);
    } finally {
      s.end();
      await s.exited;
      await env.cleanup();
    }
  });
});
