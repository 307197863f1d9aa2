import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { bundledPath, findKrunbox } from "../src/binary.ts";
import { findWorkspace, sandboxName } from "../src/workspace.ts";

const root = mkdtempSync(path.join(tmpdir(), "krunbox-ws-"));
after(() => rmSync(root, { recursive: true, force: true }));

describe("workspace", () => {
  test("the git root above cwd, a .git file included, else cwd", () => {
    const repo = path.join(root, "repo");
    mkdirSync(path.join(repo, ".git"), { recursive: true });
    mkdirSync(path.join(repo, "a", "b"), { recursive: true });
    assert.equal(findWorkspace(path.join(repo, "a", "b")), repo);
    assert.equal(findWorkspace(repo), repo);
    const wt = path.join(root, "worktree");
    mkdirSync(path.join(wt, "src"), { recursive: true });
    writeFileSync(path.join(wt, ".git"), "gitdir: /elsewhere/.git/worktrees/wt\n");
    assert.equal(findWorkspace(path.join(wt, "src")), wt);
    const plain = path.join(root, "plain", "dir");
    mkdirSync(plain, { recursive: true });
    // Assumes no .git above the temporary directory.
    assert.equal(findWorkspace(plain), plain);
  });

  test("sandbox names are stable, valid and distinct per path", () => {
    const a = sandboxName("/home/ann/src/My Project!");
    assert.match(a, /^pi-my-project-[0-9a-f]{8}$/);
    assert.equal(sandboxName("/home/ann/src/My Project!"), a);
    assert.notEqual(sandboxName("/home/bob/src/My Project!"), a);
    assert.match(sandboxName("/"), /^pi-ws-[0-9a-f]{8}$/);
    assert.match(sandboxName("/x/ÜÜÜ"), /^pi-ws-[0-9a-f]{8}$/);
    const long = sandboxName(`/x/${"a".repeat(100)}`);
    assert.ok(long.length <= 63);
    assert.match(long, /^[a-z0-9][a-z0-9-]{0,62}$/);
    assert.match(sandboxName("/x/abcdefghijklmnopqrstuvw-xyz"), /^pi-abcdefghijklmnopqrstuvw-[0-9a-f]{8}$/, "no dash left dangling after the cut");
  });
});

describe("finding krunbox", () => {
  const pkg = path.join(root, "pkg");
  const bins = path.join(root, "bins");
  const exe = (p: string) => {
    mkdirSync(path.dirname(p), { recursive: true });
    writeFileSync(p, "#!/bin/sh\n");
    chmodSync(p, 0o755);
    return p;
  };

  test("bundled first, then KRUNBOX_BIN, then PATH; says which", () => {
    const onPath = exe(path.join(bins, "krunbox"));
    const fromEnv = exe(path.join(root, "env", "krunbox"));
    assert.deepEqual(findKrunbox({ PATH: `/nonexistent:${bins}` }, pkg), { path: onPath, source: "PATH" });
    assert.deepEqual(findKrunbox({ PATH: bins, KRUNBOX_BIN: fromEnv }, pkg), { path: fromEnv, source: "KRUNBOX_BIN" });
    const bundled = exe(bundledPath(pkg));
    assert.deepEqual(findKrunbox({ PATH: bins, KRUNBOX_BIN: fromEnv }, pkg), { path: bundled, source: "bundled" });
    assert.match(bundled, new RegExp(`bin/${process.platform}-${process.arch}/krunbox$`));
  });

  test("a KRUNBOX_BIN that is not executable is an error, not a fall-through", () => {
    const notExe = path.join(root, "plainfile");
    writeFileSync(notExe, "");
    assert.throws(() => findKrunbox({ PATH: bins, KRUNBOX_BIN: notExe }, path.join(root, "nopkg")), /KRUNBOX_BIN=.* is not an executable file/);
  });

  test("nothing found says where it looked", () => {
    assert.throws(() => findKrunbox({ PATH: "/nonexistent" }, path.join(root, "nopkg")), /krunbox not found: not bundled .*KRUNBOX_BIN unset, not on PATH/);
  });
});
