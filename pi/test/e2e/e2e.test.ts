// End to end with real pi (0.73.1 and 1.x), headless against a fake model that scripts
// the tool calls, with this package loaded by `pi -e <package dir>` and krunbox from
// harness.ts (the stand-in by default; see there for KRUNBOX_E2E_BIN and KRUNBOX_E2E_VM).

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { hostname } from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { sandboxName } from "../../src/workspace.ts";
import type { Turn } from "./fake-llm.ts";
import { haveTmux, KRUNBOX_BIN, PKG, piArgs, piVersions, plain, promptOnce, RpcPi, REAL_VM, runPrint, setup, STANDIN_BIN, TuiPi, VM_SKIP } from "./harness.ts";

const HOST_TOOL = path.join(PKG, "test", "e2e", "fixtures", "host-tool.ts");
const { versions, missing } = piVersions();
const usingStandin = KRUNBOX_BIN === STANDIN_BIN;
const TMUX_SKIP = haveTmux() ? false : "SKIP: tmux is not installed (apt-get install tmux); it drives pi's interactive mode";

async function eventuallyFile(p: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(p)) {
    if (Date.now() > deadline) throw new Error(`${p} did not appear within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
  await new Promise((r) => setTimeout(r, 50));
}

/** One tool call per turn, in order, then a closing text. */
function oneByOne(calls: [string, Record<string, unknown>][]): Turn[] {
  return [...calls.map(([name, args]) => ({ tools: [{ name, args }] })), { text: "done" }];
}

for (const m of missing) test(`e2e: ${m}`, { skip: `SKIP: ${m}` }, () => {});

describe(`e2e with krunbox ${usingStandin ? "stand-in (commands run on the host)" : KRUNBOX_BIN}`, () => {
  for (const pi of versions) {
    const isOne = !pi.version.startsWith("0.");

    describe(pi.label, () => {
      test("every tool runs in the sandbox; host env and session variables stay out", async () => {
        const marker = `krunbox-e2e-${process.pid}-${Date.now()}`;
        const outside = `/root/${marker}`;
        const { llm, env, done } = await setup([], { env: { SECRET: "host-secret" } });
        try {
          const ws = env.workspace;
          llm["turns"].push(
            ...oneByOne([
              ["write", { path: path.join(ws, "a.txt"), content: "hello\n" }],
              ["write", { path: outside, content: "vm only\n" }],
              ["read", { path: outside }],
              ["edit", { path: "a.txt", edits: [{ oldText: "hello", newText: "bye" }] }],
              ["ls", { path: "." }],
              ["find", { pattern: "*.txt" }],
              ["grep", { pattern: "bye" }],
              ["bash", { command: "echo secret=${SECRET:-unset} session=${PI_SESSION_ID:-unset}; cat a.txt; touch made-by-bash; pwd" }],
              // What the sandbox has outside the workspace, the host does not: the tools see the VM's /root.
              ["ls", { path: "/root" }],
              ["find", { pattern: marker, path: "/root" }],
              ["grep", { pattern: "vm only", path: "/root" }],
            ]),
          );
          const rpc = new RpcPi(pi, env, piArgs());
          try {
            await rpc.prompt("use every tool");
          } finally {
            assert.equal(await rpc.close(), 0);
          }
          const results = llm.toolResults();
          assert.equal(results.length, 11, JSON.stringify(results));
          const byIndex = results.map((r) => r.text);
          for (const [i, r] of results.entries()) assert.doesNotMatch(r.text, /krunbox: blocked|\[krunbox\] ran on the HOST/, `${r.name} #${i}`);
          assert.equal(readFileSync(path.join(ws, "a.txt"), "utf8"), "bye\n", "write and edit reached the workspace on the host");
          assert.equal(existsSync(outside), false, `${outside} must stay in the sandbox`);
          assert.match(byIndex[2] ?? "", /vm only/);
          assert.match(byIndex[4] ?? "", /^a\.txt$/m);
          assert.match(byIndex[5] ?? "", /^a\.txt$/m);
          assert.match(byIndex[6] ?? "", /^a\.txt:1: bye$/m);
          assert.match(byIndex[7] ?? "", /secret=unset session=unset\nbye\n/);
          assert.ok((byIndex[7] ?? "").includes(ws));
          assert.ok(existsSync(path.join(ws, "made-by-bash")));
          assert.match(byIndex[8] ?? "", new RegExp(`^${marker}$`, "m"), "ls of the VM's /root");
          assert.match(byIndex[9] ?? "", new RegExp(`^${marker}$`, "m"), "find in the VM's /root");
          assert.match(byIndex[10] ?? "", new RegExp(`^${marker}:1: vm only$`, "m"), "grep in the VM's /root");
          assert.deepEqual(llm.offeredTools().sort(), ["bash", "edit", "find", "grep", "ls", "read", "write"]);
          assert.match(llm.systemPrompt(), /# Sandbox\nYour tools .* run inside a Linux microVM/);
          const statuses = rpc.statuses().map(plain);
          assert.ok(statuses.some((s) => /^krunbox: ready \(.*, pi-ws-[0-9a-f]{8}\)$/.test(s)), statuses.join("\n"));
          // pi 0.73's rpc `bash` command never reaches extensions (README, known limitations): said once.
          const warned = rpc.notifications().filter((n) => /^krunbox: pi 0\.73 in rpc mode runs the rpc client's `bash` commands .* on the HOST/.test(n));
          assert.equal(warned.length, isOne ? 0 : 1, "the rpc bash warning, on pi 0.73 only");
        } finally {
          await done();
        }
      });

      test("!cmd in rpc mode (user_bash) runs in the sandbox", { skip: !isOne && "SKIP: pi 0.73's rpc `bash` command does not emit user_bash (it always runs on the host, whatever extensions do: a known limitation, warned about, see the README and the first test); its interactive !cmd is tested below" }, async () => {
        const { env, done } = await setup([], { env: { SECRET: "host-secret" } });
        try {
          const rpc = new RpcPi(pi, env, piArgs());
          try {
            await rpc.waitFor((r) => r.method === "setStatus" && /ready/.test(plain(String(r.statusText))), "ready");
            const outside = `/root/krunbox-e2e-bang-${process.pid}-${Date.now()}`;
            // In a VM, also: its hostname, and a write outside the workspace (the stand-in would make it on the host).
            const vm = REAL_VM ? `; hostname; echo vm > ${outside}` : "";
            const res = await rpc.send({ type: "bash", command: `echo bang secret=\${SECRET:-unset}; touch bang-file${vm}` });
            assert.equal(res.success, true, JSON.stringify(res));
            assert.match(res.data.output, /bang secret=unset/);
            assert.equal(res.data.exitCode, 0);
            assert.ok(existsSync(path.join(env.workspace, "bang-file")));
            if (REAL_VM) {
              assert.match(res.data.output, new RegExp(`^${sandboxName(env.workspace)}$`, "m"), "!cmd sees the VM's hostname");
              assert.equal(existsSync(outside), false, `${outside} must stay in the sandbox`);
            }
          } finally {
            await rpc.close();
          }
        } finally {
          await done();
        }
      });

      test("interactive: the footer shows the sandbox and !cmd runs in it; blocked when broken", { skip: TMUX_SKIP }, async () => {
        for (const broken of [false, true]) {
          const { env, done } = await setup([], { env: { SECRET: "host-secret", ...(broken ? { KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" } : {}) } });
          const tui = new TuiPi(pi, env, piArgs());
          try {
            const bang = path.join(env.workspace, "bang.txt");
            if (!broken) {
              await tui.waitForScreen(/krunbox: ready \(.*pi-ws-[0-9a-f]{8}\)/, "the ready footer");
              const outside = `/root/krunbox-e2e-tui-${process.pid}-${Date.now()}`;
              const vm = REAL_VM ? `; hostname; echo vm > ${outside}` : "";
              tui.type(`!{ echo bang-\${SECRET:-unset}${vm}; } > bang.tmp && mv bang.tmp bang.txt`);
              await eventuallyFile(bang);
              assert.equal(readFileSync(bang, "utf8"), REAL_VM ? `bang-unset\n${sandboxName(env.workspace)}\n` : "bang-unset\n");
              assert.equal(existsSync(outside), false);
            } else {
              await tui.waitForScreen(/krunbox: blocked \(/, "the blocked footer");
              tui.type("!touch bang.txt; echo ran");
              await tui.waitForScreen(/krunbox: blocked, "touch bang.txt; echo ran" did not run/, "the blocked !cmd");
              assert.equal(existsSync(bang), false);
            }
          } finally {
            tui.kill();
            await done();
          }
        }
      });

      test("a broken sandbox blocks every tool and nothing runs on the host; /krunbox off then runs there, labelled", async () => {
        const { llm, env, done } = await setup([], { env: { KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" } });
        try {
          const ws = env.workspace;
          const m = (n: string) => path.join(ws, n);
          llm["turns"].push(
            {
              tools: [
                { name: "bash", args: { command: `touch ${m("ran-bash")}` } },
                { name: "write", args: { path: m("ran-write"), content: "x" } },
                { name: "read", args: { path: "/etc/hostname" } },
                { name: "edit", args: { path: m("ran-write"), edits: [{ oldText: "x", newText: "y" }] } },
                { name: "ls", args: {} },
                { name: "find", args: { pattern: "*" } },
                { name: "grep", args: { pattern: "x" } },
              ],
            },
            { text: "all blocked" },
            { tools: [{ name: "bash", args: { command: `echo on-the-host > ${m("host.txt")}; cat ${m("host.txt")}` } }] },
            { text: "ran on host" },
          );
          const rpc = new RpcPi(pi, env, piArgs());
          try {
            await rpc.waitFor((r) => r.method === "setStatus" && /blocked/.test(plain(String(r.statusText))), "blocked status");
            await rpc.prompt("try everything");
            const blocked = llm.toolResults();
            assert.equal(blocked.length, 7);
            for (const r of blocked) assert.match(r.text, /krunbox: blocked, nothing ran: the sandbox could not start: .*libkrun/, r.name);
            for (const f of ["ran-bash", "ran-write"]) assert.equal(existsSync(m(f)), false, `${f} must not exist`);
            assert.ok(rpc.notifications().some((n) => /could not start/.test(n)));
            if (isOne) {
              const bang = await rpc.send({ type: "bash", command: `touch ${m("ran-bang")}` });
              assert.match(bang.data.output, /krunbox: blocked/);
              assert.equal(existsSync(m("ran-bang")), false);
            }
            const off = await rpc.command("/krunbox off");
            assert.equal(off.success, true);
            assert.ok(rpc.statuses().map(plain).includes("krunbox: HOST (/krunbox off)"));
            await rpc.prompt("now on the host");
            const host = llm.toolResults()[7];
            assert.match(host?.text ?? "", /^\[krunbox\] ran on the HOST, not in the sandbox \(\/krunbox off\)\n/);
            assert.match(host?.text ?? "", /on-the-host/);
            assert.equal(readFileSync(m("host.txt"), "utf8"), "on-the-host\n");
          } finally {
            await rpc.close();
          }
        } finally {
          await done();
        }
      });

      test("the project file may not widen unless pi trusts the project", async () => {
        const project = `fallback = "host"\n`;
        const broken = { KRUNBOX_LIBKRUN: "/nonexistent/libkrun.so.1" };
        const runs: [string, string[], RegExp][] = [["untrusted", [], /krunbox: blocked \(/]];
        if (isOne) runs.push(["--approve", ["--approve"], /krunbox: HOST \(fallback = "host" \(project /]);
        for (const [label, extra, want] of runs) {
          const { env, done } = await setup([], { projectConfig: project, env: broken });
          try {
            const rpc = new RpcPi(pi, env, [...piArgs(), ...extra]);
            try {
              await rpc.waitFor((r) => r.method === "setStatus" && want.test(plain(String(r.statusText))), `${label}: ${want}`);
              const refused = rpc.notifications().some((n) => /fallback = "host" would run tools on the host: refused because the project is not trusted/.test(n));
              assert.equal(refused, label === "untrusted", label);
            } finally {
              await rpc.close();
            }
          } finally {
            await done();
          }
        }
      });

      test("tools of other extensions are blocked while sandboxed", async () => {
        const { llm, env, done } = await setup([]);
        try {
          const marker = path.join(env.workspace, "host-touched");
          llm["turns"].push({ tools: [{ name: "host_touch", args: { path: marker } }] }, { text: "done" });
          await promptOnce(pi, env, piArgs([HOST_TOOL]), "touch it");
          assert.match(llm.toolResults()[0]?.text ?? "", /"host_touch" would run on the host, outside the sandbox, so it is blocked/);
          assert.equal(existsSync(marker), false);
        } finally {
          await done();
        }
      });

      test("a tool call made while the sandbox starts waits for it (stand-in: its boot delay)", async () => {
        const { llm, env, done } = await setup([{ tools: [{ name: "bash", args: { command: "echo after-the-wait" } }] }, { text: "done" }], {
          env: { KRUNBOX_BIN: STANDIN_BIN, KRUNBOX_STANDIN_BOOT_MS: "2500" },
        });
        try {
          await promptOnce(pi, env, piArgs(), "go");
          assert.match(llm.toolResults()[0]?.text ?? "", /^after-the-wait/);
        } finally {
          await done();
        }
      });

      test("print mode, and --krunbox-off", async () => {
        const { llm, env, done } = await setup([
          { tools: [{ name: "bash", args: { command: "echo printed" } }] },
          (req) => ({ text: `Tool said: ${JSON.stringify(req.messages.filter((x) => x.role === "tool").map((x) => x.content))}` }),
          { tools: [{ name: "bash", args: { command: "echo off" } }] },
          { text: "ok" },
        ]);
        try {
          const r = await runPrint(pi, env, [...piArgs(), "-p", "run it"]);
          assert.equal(r.code, 0, r.stderr);
          assert.match(r.stdout, /Tool said: .*printed/);
          const off = await runPrint(pi, env, [...piArgs(), "--krunbox-off", "-p", "run it"]);
          assert.equal(off.code, 0, off.stderr);
          assert.match(llm.toolResults()[1]?.text ?? "", /^\[krunbox\] ran on the HOST, not in the sandbox \(enabled = false \(flag --krunbox-off\)\)/);
        } finally {
          await done();
        }
      });

      test("the VM: bash sees the VM's hostname and its writes outside the workspace stay there", { skip: VM_SKIP }, async () => {
        const outside = `/root/krunbox-e2e-bash-${process.pid}-${Date.now()}`;
        const { llm, env, done } = await setup([{ tools: [{ name: "bash", args: { command: `hostname; echo vm > ${outside}; cat ${outside}` } }] }, { text: "done" }]);
        try {
          await promptOnce(pi, env, piArgs(), "go");
          const out = llm.toolResults()[0]?.text ?? "";
          const [guestHost, vm] = out.split("\n");
          assert.notEqual(guestHost, hostname(), "bash runs in the VM, not on the host");
          assert.equal(guestHost, sandboxName(env.workspace), "the VM's hostname is the sandbox's name");
          assert.equal(vm, "vm");
          assert.equal(existsSync(outside), false);
        } finally {
          await done();
        }
      });
    });
  }
});

if (!REAL_VM) test("e2e VM assertions", { skip: VM_SKIP }, () => {});
