// The npm tarball made by `make pi-package`: what it holds, and that pi loads it and uses
// the krunbox bundled in it. Skipped (loudly) when the tarball has not been built.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { bundledPath, findKrunbox } from "../src/binary.ts";
import { sandboxName } from "../src/workspace.ts";
import { PKG, piArgs, piVersions, plain, REAL_VM, RpcPi, setup } from "./e2e/harness.ts";

const version = JSON.parse(readFileSync(path.join(PKG, "package.json"), "utf8")).version as string;
const tarball = path.resolve(PKG, "..", "build", `pi-krunbox-${version}.tgz`);
const skip = existsSync(tarball) ? false : `SKIP: ${tarball} not built; run make pi-package (make test does)`;

describe("the npm package", { skip }, () => {
  const dir = mkdtempSync(path.join(tmpdir(), "pi-krunbox-pkg-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const unpacked = path.join(dir, "package");

  test("holds the extension, the README and the host's krunbox, and no tests", () => {
    const files = execFileSync("tar", ["-tzf", tarball]).toString().trim().split("\n").sort();
    const bin = `package/bin/${process.platform}-${process.arch}/krunbox`;
    for (const f of ["package/package.json", "package/index.ts", "package/README.md", "package/src/extension.ts", "package/src/rpc.ts", bin]) {
      assert.ok(files.includes(f), `${f} in ${files.join(", ")}`);
    }
    assert.deepEqual(files.filter((f) => /(^|\/)(test|node_modules)\//.test(f)), []);
    execFileSync("tar", ["-xzf", tarball, "-C", dir]);
    assert.ok(statSync(path.join(dir, bin)).mode & 0o111, "the bundled krunbox is executable");
    const pkg = JSON.parse(readFileSync(path.join(unpacked, "package.json"), "utf8"));
    assert.ok(pkg.keywords.includes("pi-package"));
    assert.deepEqual(pkg.pi, { extensions: ["./index.ts"] });
    assert.ok(pkg.peerDependencies["@mariozechner/pi-coding-agent"] && pkg.peerDependencies["@earendil-works/pi-coding-agent"]);
    assert.equal(pkg.peerDependenciesMeta["@earendil-works/pi-coding-agent"].optional, true, "pi 0.73's npm install must not pull pi 1.x");
  });

  test("the bundled krunbox is found first", () => {
    const found = findKrunbox({ PATH: "/nonexistent", KRUNBOX_BIN: "/bin/true" }, unpacked);
    assert.deepEqual(found, { path: bundledPath(unpacked), source: "bundled" });
  });

  for (const pi of piVersions().versions) {
    test(`${pi.label}: pi install, then it loads, says which krunbox it uses${REAL_VM ? ", and that krunbox runs the tools in the VM" : ""}`, async () => {
      // The package's dependencies come from this checkout's node_modules: nothing is fetched.
      if (!existsSync(path.join(unpacked, "node_modules"))) symlinkSync(path.join(PKG, "node_modules"), path.join(unpacked, "node_modules"));
      const { llm, env, done } = await setup([{ tools: [{ name: "bash", args: { command: "hostname" } }] }, { text: "done" }]);
      try {
        delete env.env.KRUNBOX_BIN;
        execFileSync(pi.node, [pi.cli, "install", unpacked], { env: env.env, cwd: env.workspace, stdio: "pipe" });
        const settings = JSON.parse(readFileSync(path.join(env.agentDir, "settings.json"), "utf8"));
        assert.equal(settings.packages?.length, 1, JSON.stringify(settings));
        // Loaded from the installed package: no -e, and discovery left on.
        const args = piArgs().filter((a, i, all) => a !== "--no-extensions" && a !== PKG && !(a === "-e" && all[i + 1] === PKG));
        const rpc = new RpcPi(pi, env, args);
        try {
          // Without a VM to run (KRUNBOX_E2E_VM), the default image's pull fails at once here:
          // blocked is enough to show which krunbox was used.
          const want = REAL_VM ? /ready/ : /ready|blocked/;
          await rpc.waitFor((r) => r.method === "setStatus" && want.test(plain(String(r.statusText))), `the sandbox to be ${want.source}`);
          await rpc.command("/krunbox status");
          const status = rpc.notifications().find((n) => /^krunbox: (ready|blocked)/.test(n)) ?? "";
          assert.ok(status.includes(`${bundledPath(unpacked)} (bundled with pi-krunbox)`), status);
          assert.ok(rpc.notifications().includes(`krunbox: using ${bundledPath(unpacked)} (bundled with pi-krunbox)`), "said when the session started");
          assert.doesNotMatch(rpc.statuses().map(plain).join("\n"), /HOST/);
          if (REAL_VM) {
            await rpc.prompt("what is the hostname?");
            assert.equal(llm.toolResults()[0]?.text.trim(), sandboxName(env.workspace), "bash ran in the bundled krunbox's VM");
          }
        } finally {
          await rpc.close();
        }
      } finally {
        await done();
      }
    });
  }
});
