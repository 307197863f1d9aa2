// workspace = "isolated": each pi session gets its own checkout of the project's HEAD,
// reused when it resumes; /krunbox diff, export, land and workspaces, with confirmation.
// Needs the real krunbox (make pi-test runs it against build/krunbox on the test double).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { KrunboxExtension } from "../src/extension.ts";
import { FakePi } from "./fake-pi.ts";
import { eventually, IMAGE, IS_STANDIN, removeSandboxes, SERVE_BIN } from "./serve-driver.ts";

const roots: string[] = [];
const opened: { pi: FakePi; env: NodeJS.ProcessEnv; home: string }[] = [];
after(async () => {
  for (const s of opened) await s.pi.emit("session_shutdown", { reason: "quit" });
  for (const s of opened) await removeSandboxes({ bin: s.env.KRUNBOX_BIN as string, env: s.env }, s.home);
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

function git(dir: string, ...args: string[]): string {
  return execFileSync("git", args, {
    cwd: dir,
    env: { PATH: process.env.PATH, HOME: dir, GIT_CONFIG_NOSYSTEM: "1", GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@t", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@t" },
    encoding: "utf8",
  }).trim();
}

/** A project (a git repository with one commit), and krunbox's home. */
function project(): { root: string; ws: string; home: string } {
  const root = realpathSync(mkdtempSync(path.join(tmpdir(), "krunbox-iso-")));
  roots.push(root);
  const ws = path.join(root, "proj");
  const home = path.join(root, "kh");
  mkdirSync(ws);
  mkdirSync(path.join(home, "config"), { recursive: true });
  writeFileSync(path.join(home, "config", "pi.toml"), `image = ${JSON.stringify(IMAGE)}\nworkspace = "isolated"\n`);
  git(ws, "init", "-q", "-b", "main");
  writeFileSync(path.join(ws, "a"), "base\n");
  git(ws, "add", "a");
  git(ws, "commit", "-qm", "base");
  return { root, ws, home };
}

/** A pi session in the project, with its id. */
async function session(p: { ws: string; home: string }, id: string): Promise<FakePi> {
  const fromEnv = process.env.KRUNBOX_SERVE_ENV ? (JSON.parse(process.env.KRUNBOX_SERVE_ENV) as NodeJS.ProcessEnv) : {};
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, KRUNBOX_HOME: p.home, KRUNBOX_BIN: SERVE_BIN, ...fromEnv };
  const pi = new FakePi(p.ws);
  pi.sessionId = id;
  new KrunboxExtension(pi.api(), { env, argv: ["node", "pi"], findBinary: (e) => ({ path: e.KRUNBOX_BIN as string, source: "KRUNBOX_BIN" }) }).register();
  opened.push({ pi, env, home: p.home });
  await pi.emit("session_start", { reason: "startup" });
  await eventually(() => /ready/.test(pi.status()), `ready, status is ${pi.status()}`, 60_000);
  return pi;
}

function lastNote(pi: FakePi): string {
  return pi.notes[pi.notes.length - 1]?.message ?? "";
}

describe("isolated workspaces", { skip: IS_STANDIN && "SKIP: needs the real krunbox (make pi-test)" }, () => {
  test("two sessions work apart, each lands its own branch; a resumed session finds its checkout", { timeout: 120_000 }, async () => {
    const p = project();
    const one = await session(p, "session-one");
    const two = await session(p, "session-two");
    assert.equal((await one.call("bash", { command: `echo one > ${p.ws}/a && cat ${p.ws}/a` })).text.trim(), "one");
    assert.equal((await two.call("read", { path: `${p.ws}/a` })).text.trim(), "base", "session two does not see session one's edit");
    await two.call("write", { path: `${p.ws}/b`, content: "two\n" });
    assert.equal(readFileSync(path.join(p.ws, "a"), "utf8"), "base\n", "the user's checkout is never written");
    assert.ok(!existsSync(path.join(p.ws, "b")));

    await one.command("krunbox", "diff --stat");
    assert.match(lastNote(one), /a \| 2 \+-/);
    await one.command("krunbox", "workspaces");
    const list = lastNote(one);
    assert.match(list, /krunbox\/pi-proj-\w+-\w+/);
    assert.equal(list.split("\n").length, 3, `two workspaces listed:\n${list}`);

    await one.command("krunbox", "restart");
    assert.ok(one.notes.some((n) => n.level === "error" && /work not landed, which recreating it would lose/.test(n.message)), "restart refuses to drop work not landed");

    one.confirmAnswer = false;
    await one.command("krunbox", "land");
    assert.equal(one.confirms.length, 1);
    assert.match(one.confirms[0]?.message ?? "", /a \| 2 \+-/, "the confirmation shows what lands");
    assert.match(lastNote(one), /cancelled/);
    assert.equal(git(p.ws, "branch", "--list", "krunbox/*"), "", "nothing landed when the user says no");
    one.confirmAnswer = true;
    await one.command("krunbox", "land");
    await two.command("krunbox", "land --yes");
    assert.equal(two.confirms.length, 0, "--yes asks nothing");
    const branches = git(p.ws, "branch", "--list", "krunbox/*", "--format=%(refname:short)").split("\n");
    assert.equal(branches.length, 2, branches.join(" "));
    const [b1, b2] = branches.sort();
    const showA = (b: string) => git(p.ws, "show", `${b}:a`);
    assert.deepEqual([showA(b1 as string), showA(b2 as string)].sort(), ["base", "one"]);

    const out = path.join(p.root, "out");
    await two.command("krunbox", `export b --to ${out} --yes`);
    assert.equal(readFileSync(path.join(out, "b"), "utf8"), "two\n");

    // Session one ends and resumes: same checkout, its edit still there.
    await one.emit("session_shutdown", { reason: "quit" });
    const resumed = await session(p, "session-one");
    assert.equal((await resumed.call("read", { path: `${p.ws}/a` })).text.trim(), "one");

    await resumed.command("krunbox", "workspaces rm nope --yes");
    assert.match(lastNote(resumed), /nope is no isolated workspace/);
    const twoName = (showA(b1 as string) === "base" ? (b1 as string) : (b2 as string)).replace("krunbox/", "");
    await two.emit("session_shutdown", { reason: "quit" });
    await resumed.command("krunbox", `workspaces rm ${twoName}`);
    assert.match(resumed.confirms[0]?.message ?? "", new RegExp(`Remove the isolated workspace ${twoName}`));
    assert.match(lastNote(resumed), new RegExp(`removed ${twoName}`));
    await resumed.command("krunbox", "workspaces");
    assert.equal(lastNote(resumed).split("\n").length, 2, lastNote(resumed));
  });
});
