import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { bundledPath, describeBinary, findKrunbox } from "../src/binary.ts";
import { findWorkspace, refusedWorkspace, sandboxName } from "../src/workspace.ts";

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

  test("refusedWorkspace: /, the home directory and what holds it, system directories, also through symlinks", () => {
    const r = realpathSync(mkdtempSync(path.join(root, "refuse-")));
    const home = path.join(r, "home", "ann");
    const proj = path.join(home, "src", "proj");
    mkdirSync(proj, { recursive: true });
    const link = (name: string, target: string) => {
      symlinkSync(target, path.join(r, name));
      return path.join(r, name);
    };
    const toHome = link("to-home", home);
    const toHomes = link("to-homes", path.join(r, "home"));
    const toEtc = link("to-etc", "/etc");
    const toRoot = link("to-root", "/");
    const toProj = link("to-proj", proj);
    const homeLink = link("home-link", home);
    const ok = undefined;
    const cases: [string, string, NodeJS.ProcessEnv, RegExp | undefined][] = [
      ["/", "/", { HOME: home }, /^refusing to mount \/ \(the root directory\) into the sandbox: start pi in a project directory, or \/krunbox off$/],
      ...["/etc", "/usr", "/var", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/boot", "/tmp", "/usr/local", "/var/lib", "/dev", "/proc/self", "/sys/kernel"].map(
        (d): [string, string, NodeJS.ProcessEnv, RegExp] => [d, d, { HOME: "/nonexistent/ann" }, /\(a system directory/],
      ),
      ["/root when HOME is elsewhere", "/root", { HOME: "/nonexistent/ann" }, /\/root \(a system directory\)/],
      ["/root when it is HOME", "/root", { HOME: "/root" }, /\/root \(your home directory\)/],
      ["/home", "/home", { HOME: "/nonexistent/ann" }, /\(a system directory\)/],
      ["/home when it holds HOME", "/home", { HOME: "/home/ann" }, /\(it holds your home directory \/home\/ann\)/],
      ["the home directory", home, { HOME: home }, /\(your home directory\)/],
      ["the home directory with a trailing slash", `${home}/`, { HOME: home }, /\(your home directory\)/],
      ["the directory above it", path.join(r, "home"), { HOME: home }, new RegExp(`\\(it holds your home directory ${home}\\)`)],
      ["two above it", r, { HOME: home }, /\(it holds your home directory/],
      ["a link to the home directory", toHome, { HOME: home }, new RegExp(`^refusing to mount ${toHome} \\(your home directory: it is ${home}\\)`)],
      ["a link to the directory above it", toHomes, { HOME: home }, /\(it holds your home directory .*: it is /],
      ["a link to /etc", toEtc, { HOME: home }, /\(a system directory: it is \/etc\)/],
      ["a link to /", toRoot, { HOME: home }, /\(the root directory: it is \/\)/],
      ["the home directory when HOME is a link to it", home, { HOME: homeLink }, /\(your home directory\)/],
      ["a project in the home directory", proj, { HOME: home }, ok],
      ["a link to a project", toProj, { HOME: home }, ok],
      ["a project under the HOME link", path.join(homeLink, "src", "proj"), { HOME: homeLink }, ok],
      ["a directory in /tmp", r, { HOME: "/nonexistent/home" }, ok],
      ["a project in /opt", "/opt/some-project", { HOME: home }, ok],
      ["a project in /usr/local/src", "/usr/local/src/some-project", { HOME: home }, ok],
    ];
    for (const [label, ws, env, want] of cases) {
      const got = refusedWorkspace(ws, env);
      if (want === undefined) assert.equal(got, undefined, label);
      else assert.match(got ?? "(not refused)", want, label);
    }
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

  test("describeBinary says the path and where it came from", () => {
    assert.equal(describeBinary({ path: "/p/krunbox", source: "bundled" }), "/p/krunbox (bundled with pi-krunbox)");
    assert.equal(describeBinary({ path: "/e/krunbox", source: "KRUNBOX_BIN" }), "/e/krunbox (from KRUNBOX_BIN)");
    assert.equal(describeBinary({ path: "/usr/bin/krunbox", source: "PATH" }), "/usr/bin/krunbox (found on PATH)");
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
