import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { hasGuardedResources, piTrustIsDecision, savedTrust, workspaceTrust } from "../src/trust.ts";

const root = realpathSync(mkdtempSync(path.join(tmpdir(), "krunbox-trust-")));
after(() => rmSync(root, { recursive: true, force: true }));

function project(name: string, files: string[] = []): string {
  const dir = path.join(root, name);
  mkdirSync(path.join(dir, ".pi"), { recursive: true });
  writeFileSync(path.join(dir, ".pi", "krunbox.toml"), "");
  for (const f of files) {
    mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
    writeFileSync(path.join(dir, f), "{}");
  }
  return dir;
}

describe("is pi's trust a decision", () => {
  const home = path.join(root, "home");
  const agent = path.join(root, "agent");
  mkdirSync(path.join(home, ".agents", "skills"), { recursive: true });
  mkdirSync(agent, { recursive: true });
  const env = { HOME: home, PI_CODING_AGENT_DIR: agent };

  test("only krunbox's own file: pi's trust is a default", () => {
    const p = project("plain");
    assert.equal(hasGuardedResources(p, home), false);
    assert.equal(piTrustIsDecision(p, env, ["node", "pi"]), false);
  });

  test("resources pi guards make it decide", () => {
    assert.equal(hasGuardedResources(project("settings", [".pi/settings.json"]), home), true);
    assert.equal(hasGuardedResources(project("ext", [".pi/extensions/x.ts"]), home), true);
    assert.equal(hasGuardedResources(project("skills", [".agents/skills/s/SKILL.md"]), home), true);
    assert.equal(piTrustIsDecision(project("sys", [".pi/APPEND_SYSTEM.md"]), env, ["node", "pi"]), true);
  });

  test("the user's own ~/.agents/skills does not count", () => {
    const inside = path.join(home, "src", "p");
    mkdirSync(inside, { recursive: true });
    assert.equal(hasGuardedResources(inside, home), false);
  });

  test("--approve and -a are decisions", () => {
    const p = project("approve");
    assert.equal(piTrustIsDecision(p, env, ["node", "pi", "--approve", "-p", "x"]), true);
    assert.equal(piTrustIsDecision(p, env, ["node", "pi", "-a"]), true);
  });

  test("a saved decision in trust.json, for the project or a parent", () => {
    const p = project("saved");
    writeFileSync(path.join(agent, "trust.json"), JSON.stringify({ [root]: true, [path.join(root, "denied")]: false }));
    assert.equal(savedTrust(p, agent), true);
    assert.equal(piTrustIsDecision(p, env, ["node", "pi"]), true);
    assert.equal(savedTrust(project("denied"), agent), false);
    writeFileSync(path.join(agent, "trust.json"), "not json");
    assert.equal(savedTrust(p, agent), undefined, "an unreadable store is no decision");
    rmSync(path.join(agent, "trust.json"));
  });

  test("pi's answer is about its cwd: it counts for the workspace only when they are one directory", () => {
    const ws = project("repo", [".pi/settings.json"]);
    const sub = path.join(ws, "pkg");
    mkdirSync(path.join(sub, ".pi"), { recursive: true });
    writeFileSync(path.join(sub, ".pi", "settings.json"), "{}");
    const plain = project("plain-repo");
    const link = path.join(root, "repo-link");
    symlinkSync(ws, link);
    const q = (piSays: boolean | undefined, cwd: string, workspace: string, argv = ["node", "pi"]) => workspaceTrust({ piSays, cwd, workspace, env, argv });
    const cases: [string, ReturnType<typeof q>["trusted"], ReturnType<typeof q>, RegExp][] = [
      ["pi 0.73", undefined, q(undefined, ws, ws), /pi 0\.73 has no project trust/],
      ["cwd is the workspace, pi decided", true, q(true, ws, ws), /^pi: trusted$/],
      ["cwd is the workspace, pi says no", false, q(false, ws, ws), /^pi: not trusted$/],
      ["cwd is the workspace, trusted by default only", false, q(true, plain, plain), /by default only/],
      ["cwd is the workspace, --approve", true, q(true, plain, plain, ["node", "pi", "--approve"]), /^pi: trusted$/],
      ["a subdirectory pi decided to trust", false, q(true, sub, ws), new RegExp(`about ${sub}, not the workspace ${ws}`)],
      ["a subdirectory with --approve", false, q(true, sub, ws, ["node", "pi", "-a"]), /not counted/],
      ["the workspace through a symlink", true, q(true, link, ws), /^pi: trusted$/],
    ];
    for (const [label, want, got, note] of cases) {
      assert.equal(got.trusted, want, label);
      assert.match(got.note, note, label);
    }
    writeFileSync(path.join(agent, "trust.json"), JSON.stringify({ [ws]: true }));
    try {
      assert.deepEqual(q(false, sub, ws), { trusted: true, note: `pi: a saved decision trusts the workspace ${ws}` }, "a decision saved for the workspace counts");
    } finally {
      rmSync(path.join(agent, "trust.json"));
    }
  });
});
