// Guest operations, find and grep, through a serve server (the stand-in by default). With
// the stand-in (commands on the host) the guest's tools are played by busybox (as in a
// busybox-only image) and by GNU grep/find; with a real server they are the image's own
// busybox applets, called by name as the probe finds them there.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { FirstRead, fsError, GuestFS, globMatcher, guestGlob, guestOutput, LsCache, signalExitCode, sniffImage, withCallSignal } from "../src/guest.ts";
import { formatGrep, guestGrep, MatchCollector, parseGrepLine, parseRgJson, rgArgv } from "../src/grep.ts";
import { ErrorCode, RpcError, type SandboxStatus } from "../src/protocol.ts";
import type { ServeClient } from "../src/rpc.ts";
import type { GuestTools, Ready } from "../src/sandbox.ts";
import { IS_STANDIN, ServeEnv, stopProcesses } from "./serve-driver.ts";

const BUSYBOX = ["/usr/bin/busybox", "/bin/busybox"].find(existsSync);
const GNU = { grep: ["/usr/bin/grep", "/bin/grep"].find(existsSync), find: ["/usr/bin/find", "/bin/find"].find(existsSync), xargs: ["/usr/bin/xargs", "/bin/xargs"].find(existsSync) };

describe("pure helpers", () => {
  test("fsError maps codes to node-style errors", () => {
    const e = fsError(new RpcError(ErrorCode.NotFound, "x"), "open", "/a/b") as NodeJS.ErrnoException;
    assert.equal(e.code, "ENOENT");
    assert.equal(e.message, "ENOENT: no such file or directory, open '/a/b'");
    assert.equal((fsError(new RpcError(ErrorCode.IsDir, "x"), "open", "/d") as NodeJS.ErrnoException).code, "EISDIR");
    assert.equal(fsError(new RpcError(ErrorCode.NotReady, "sandbox stopped"), "open", "/a").message, "krunbox: open /a: sandbox stopped");
  });

  test("sniffImage knows pi's image types by their magic", () => {
    assert.equal(sniffImage(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0])), "image/png");
    assert.equal(sniffImage(Buffer.from([0xff, 0xd8, 0xff, 0xe0])), "image/jpeg");
    assert.equal(sniffImage(Buffer.from("GIF89a....")), "image/gif");
    assert.equal(sniffImage(Buffer.from("RIFF\0\0\0\0WEBPVP8 ")), "image/webp");
    assert.equal(sniffImage(Buffer.from("#!/bin/sh\n")), undefined);
  });

  test("signals become 128+N exit codes", () => {
    assert.equal(signalExitCode("SIGKILL"), 137);
    assert.equal(signalExitCode("SIGTERM"), 143);
    assert.equal(signalExitCode("SIGINT"), 130);
  });

  test("globMatcher follows pi's find semantics", () => {
    const m = (pat: string, p: string) => globMatcher(pat, "/ws")(p);
    assert.equal(m("*.ts", "/ws/a/b/c.ts"), true, "no slash: the name at any depth");
    assert.equal(m("*.ts", "/ws/a/b/c.js"), false);
    assert.equal(m("src/*.ts", "/ws/src/a.ts"), true, "a slash: relative to the search dir");
    assert.equal(m("src/*.ts", "/ws/pkg/src/a.ts"), false);
    assert.equal(m("**/src/*.ts", "/ws/pkg/src/a.ts"), true);
    assert.equal(m("./src/*.ts", "/ws/src/a.ts"), true, "a leading ./ is dropped");
    assert.equal(m("*", "/ws/.hidden"), true, "* matches dot files");
    assert.equal(m("readme*", "/ws/README.md"), true, "all-lowercase ignores case");
    assert.equal(m("README*", "/ws/readme.md"), false, "mixed case is exact");
    assert.equal(m("/ws/src/**", "/ws/src/x/y.ts"), true, "absolute patterns match absolute paths");
  });

  test("parseGrepLine splits on the known file name even with : and - in it", () => {
    const files = new Set(["/w/we:ird-1:2.txt", "/w/a.ts"]);
    assert.deepEqual(parseGrepLine("/w/we:ird-1:2.txt:7:x:y", files), { file: "/w/we:ird-1:2.txt", line: 7, text: "x:y", match: true });
    assert.deepEqual(parseGrepLine("/w/a.ts-3-ctx - line", files), { file: "/w/a.ts", line: 3, text: "ctx - line", match: false });
    assert.equal(parseGrepLine("Binary file /w/a.ts matches", files), undefined);
    assert.equal(parseGrepLine("/w/other.ts:1:x", files), undefined);
  });

  test("parseRgJson reads matches and context, text and bytes", () => {
    const match = JSON.stringify({ type: "match", data: { path: { text: "src/a.ts" }, lines: { text: "hello\n" }, line_number: 4 } });
    assert.deepEqual(parseRgJson(match, "/ws"), { file: "/ws/src/a.ts", line: 4, text: "hello\n", match: true });
    const ctx = JSON.stringify({ type: "context", data: { path: { bytes: Buffer.from("/abs/ü.txt").toString("base64") }, lines: { text: "c" }, line_number: 1 } });
    assert.deepEqual(parseRgJson(ctx, "/ws"), { file: "/abs/ü.txt", line: 1, text: "c", match: false });
    assert.equal(parseRgJson(JSON.stringify({ type: "begin", data: {} }), "/ws"), undefined);
    assert.equal(parseRgJson("not json", "/ws"), undefined);
  });

  test("rgArgv builds pi's ripgrep command", () => {
    assert.deepEqual(rgArgv("/usr/bin/rg", { pattern: "-x", ignoreCase: true, literal: true, glob: "./src/*.ts" }, ".", 2), [
      "/usr/bin/rg", "--no-config", "--json", "--line-number", "--color=never", "--hidden", "--ignore-case", "--fixed-strings",
      "--glob", "src/*.ts", "--context", "2", "--", "-x", ".",
    ]);
  });

  test("MatchCollector stops at the limit, keeps trailing context, proves the limit", () => {
    const c = new MatchCollector(2, 1);
    const L = (line: number, match: boolean, file = "/f") => ({ file, line, text: `l${line}`, match });
    assert.equal(c.add(L(1, true)), true);
    assert.equal(c.add(L(5, true)), true);
    assert.equal(c.add(L(6, false)), true, "trailing context of the last match");
    assert.equal(c.add(L(9, true)), false, "a match past the window proves the limit and ends");
    assert.equal(c.limitReached, true);
    assert.deepEqual(c.lines.map((l) => l.line), [1, 5, 6]);
    const out = formatGrep(c, "/", true, 2).content[0]?.text ?? "";
    assert.match(out, /^f:1: l1\nf:5: l5\nf-6- l6\n\n\[2 matches limit reached/);
    const exact = new MatchCollector(2, 0);
    exact.add(L(1, true));
    exact.add(L(2, true));
    assert.equal(exact.limitReached, false, "exactly `limit` matches is not a cut");
  });
});

describe("guest operations through serve", () => {
  const env = new ServeEnv();
  const name = env.name("guest");
  let c: ServeClient;
  let status: SandboxStatus;
  const ws = env.workspace;
  const readyWith = (tools: GuestTools): Ready => ({ client: c, name, status, tools, callTimeoutMs: 30_000, timedOut: async (late) => new Error(late) });

  before(async () => {
    c = await env.connect();
    status = await c.request<SandboxStatus>("sandbox.ensure", env.ensureParams(name));
    const put = (rel: string, text: string) => {
      mkdirSync(path.dirname(path.join(ws, rel)), { recursive: true });
      writeFileSync(path.join(ws, rel), text);
    };
    put("src/a.ts", "hello world\nfoo\nHello again\nx.y and xzy\n");
    put("src/b.js", "hello js\n");
    put(".git/config", "hello git\n");
    put("node_modules/x/index.js", "hello nm\n");
    put("we:ird-name.txt", "x\nhello weird\n");
    put("sub/deep/c.ts", "hello deep\n");
  });
  after(async () => {
    await c?.request("sandbox.stop", { name, remove: true }).catch(() => {});
    await c?.close();
    await env.cleanup();
  });

  test("GuestFS reads big files in chunks and maps errors", async () => {
    const gfs = new GuestFS(() => readyWith({}));
    const big = Buffer.alloc((c.info?.limits.maxReadBytes ?? 0) * 2 + 123, "z");
    writeFileSync(path.join(ws, "big.bin"), big);
    assert.ok((await gfs.readFile(path.join(ws, "big.bin"))).equals(big));
    await assert.rejects(gfs.readFile(path.join(ws, "missing")), { code: "ENOENT" });
    assert.equal(await gfs.exists(path.join(ws, "missing")), false);
    assert.equal(await gfs.exists(path.join(ws, "src")), true);
    await gfs.writeFile(path.join(ws, "new", "dir", "f.txt"), "made", true);
    assert.equal((await gfs.readFile(path.join(ws, "new", "dir", "f.txt"))).toString(), "made");
  });

  test("a call without an answer in time fails with the sandbox's timedOut error; the tool's abort ends it at once", async () => {
    const late: string[] = [];
    const r: Ready = { ...readyWith({}), callTimeoutMs: 300, timedOut: async (l) => (late.push(l), new Error(`unresponsive: ${l}`)) };
    const gfs = new GuestFS(() => r);
    const f = path.join(ws, "src", "a.ts");
    await stopProcesses([c.pid as number]);
    try {
      const t0 = Date.now();
      await assert.rejects(gfs.stat(f), { message: `unresponsive: fs.stat ${f} got no answer within 300 ms` });
      assert.ok(Date.now() - t0 >= 290, "not before the deadline");
      await assert.rejects(guestOutput(r, ["true"]), { message: "unresponsive: the start of true got no answer within 300 ms" });
      const ac = new AbortController();
      const patient = new GuestFS(() => ({ ...r, callTimeoutMs: 60_000 }));
      const aborted = withCallSignal(ac.signal, () => patient.readFile(f));
      const t1 = Date.now();
      ac.abort();
      await assert.rejects(aborted, /fs\.readFile: aborted/);
      assert.ok(Date.now() - t1 < 1000, "the abort does not wait for the deadline");
      assert.equal(late.length, 2, "an abort is no sign of an unresponsive sandbox");
    } finally {
      process.kill(c.pid as number, "SIGCONT");
    }
    assert.equal((await gfs.stat(f)).type, "file", "it answers again");
  });

  test("LsCache answers stats of listed entries without round trips, except symlinks", async () => {
    const dir = path.join(ws, "lsdir");
    mkdirSync(path.join(dir, "d"), { recursive: true });
    writeFileSync(path.join(dir, "f"), "");
    symlinkSync("d", path.join(dir, "l"));
    let calls = 0;
    const counting = { ...readyWith({}), client: { request: (m: string, p: object) => (calls++, c.request(m, p)) } as unknown as ServeClient };
    const ls = new LsCache(new GuestFS(() => counting));
    const names = (await ls.readdir(dir)).sort();
    assert.deepEqual(names, ["d", "f", "l"]);
    assert.equal(calls, 1);
    assert.equal((await ls.stat(path.join(dir, "d"))).isDirectory(), true);
    assert.equal((await ls.stat(path.join(dir, "f"))).isDirectory(), false);
    assert.equal(calls, 1, "no round trip for listed files and directories");
    assert.equal((await ls.stat(path.join(dir, "l"))).isDirectory(), true, "a symlink is followed");
    assert.equal(calls, 2);
  });

  test("FirstRead: one round trip for a small file's access, type and content", async () => {
    let calls = 0;
    const counting = { ...readyWith({}), client: { request: (m: string, p: object) => (calls++, c.request(m, p)) } as unknown as ServeClient };
    const first = new FirstRead(new GuestFS(() => counting));
    const small = path.join(ws, "small.txt");
    writeFileSync(small, "tiny\n");
    await first.access(small);
    assert.equal(await first.detectImageMimeType(small), null);
    assert.equal((await first.readFile(small)).toString(), "tiny\n");
    assert.equal(calls, 1);
    const big = path.join(ws, "big.txt");
    const content = Buffer.from("0123456789abcdef".repeat(10_000));
    writeFileSync(big, content);
    calls = 0;
    await first.access(big);
    assert.ok((await first.readFile(big)).equals(content), "a big file is read on from the head");
    assert.equal(calls, 2);
    const png = path.join(ws, "dot.png");
    writeFileSync(png, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3]));
    await first.access(png);
    assert.equal(await first.detectImageMimeType(png), "image/png");
    await assert.rejects(first.access(path.join(ws, "missing")), { code: "ENOENT" });
    await assert.rejects(first.access(ws), { code: "EISDIR" });
    writeFileSync(small, "changed\n");
    assert.equal((await first.readFile(small)).toString(), "changed\n", "without a fresh access, readFile reads the file");
  });

  const toolsets: [string, GuestTools | undefined][] = IS_STANDIN
    ? [
        ["busybox", BUSYBOX ? { grep: path.join(env.root, "bb", "grep"), find: path.join(env.root, "bb", "find"), xargs: path.join(env.root, "bb", "xargs") } : undefined],
        ["GNU", GNU.grep && GNU.find && GNU.xargs ? { grep: GNU.grep, find: GNU.find, xargs: GNU.xargs } : undefined],
      ]
    : [["the image's busybox", { grep: "grep", find: "find", xargs: "xargs" }]];
  if (BUSYBOX && IS_STANDIN) {
    mkdirSync(path.join(env.root, "bb"), { recursive: true });
    for (const a of ["grep", "find", "xargs"]) symlinkSync(BUSYBOX, path.join(env.root, "bb", a));
  }

  for (const [label, tools] of toolsets) {
    const skip = !tools ? `SKIP: ${label} grep/find/xargs not installed (apt-get install busybox-static)` : false;
    describe(`grep and find with ${label} tools`, { skip }, () => {
      const r = () => readyWith(tools as GuestTools);
      const grep = async (p: object, where = ws) => (await guestGrep(r(), { pattern: "hello", ...p }, where, !where.endsWith(".ts"))).content[0]?.text;

      test("finds matches, skips .git and node_modules, relative paths", async () => {
        const out = (await grep({}))?.split("\n").sort();
        assert.deepEqual(out, ["src/a.ts:1: hello world", "src/b.js:1: hello js", "sub/deep/c.ts:1: hello deep", "we:ird-name.txt:2: hello weird"]);
      });

      test("ignoreCase, literal, glob, context, limit", async () => {
        assert.match((await grep({ ignoreCase: true, glob: "*.ts" })) ?? "", /src\/a\.ts:3: Hello again/);
        assert.equal(await grep({ pattern: "x.y", literal: true }), "src/a.ts:4: x.y and xzy");
        assert.deepEqual((await grep({ glob: "*.ts" }))?.split("\n").sort(), ["src/a.ts:1: hello world", "sub/deep/c.ts:1: hello deep"]);
        assert.equal(await grep({ glob: "src/*.ts" }), "src/a.ts:1: hello world");
        assert.equal(await grep({ pattern: "foo", context: 1 }), "src/a.ts-1- hello world\nsrc/a.ts:2: foo\nsrc/a.ts-3- Hello again");
        assert.match((await grep({ limit: 1 })) ?? "", /\n\n\[1 matches limit reached/);
        assert.equal(await grep({ pattern: "nothing-matches-this" }), "No matches found");
      });

      test("a bad pattern is an error, not 'no matches'", async () => {
        await assert.rejects(grep({ pattern: "(" }), /regex|\(/);
      });

      test("a file path searches that file", async () => {
        assert.equal(await grep({}, path.join(ws, "src", "a.ts")), "a.ts:1: hello world");
      });

      test("find lists by glob, prunes, honours the limit", async () => {
        const g = (pat: string, limit = 100) => guestGlob(r(), pat, ws, { ignore: ["**/node_modules/**", "**/.git/**"], limit });
        assert.deepEqual((await g("*.ts")).sort(), [path.join(ws, "src/a.ts"), path.join(ws, "sub/deep/c.ts")]);
        assert.deepEqual(await g("sub/**"), [path.join(ws, "sub/deep/c.ts")]);
        assert.deepEqual(await g("*.TS"), [], "mixed case is exact");
        assert.equal((await g("*", 2)).length, 2);
        assert.deepEqual(await g("index.js"), [], "node_modules is ignored");
      });
    });
  }
});
