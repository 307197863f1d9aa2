// Tool-call overhead added by the extension on a ready sandbox: a small `read` and a
// `bash` of `true` through the extension (tool_call gate, pi's own tool definition, the
// extension's operations, the RPC client) against the same operation sent directly on the
// same krunbox serve connection, interleaved in one run. Medians and p90 in ms.
//
// Server: KRUNBOX_SERVE_BIN (default: the stand-in, a TypeScript process whose own costs
// cancel out in the difference but not in the absolute figures).
//
//   make bench-pi                      # from the repository root
//   BENCH_N=1000 make bench-pi

import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { performance } from "node:perf_hooks";
import { KrunboxExtension } from "../src/extension.ts";
import type { ServeClient } from "../src/rpc.ts";
import { sandboxName } from "../src/workspace.ts";
import { FakePi } from "../test/fake-pi.ts";
import { IMAGE, IS_STANDIN, SERVE_BIN, ServeEnv } from "../test/serve-driver.ts";

const N = Number(process.env.BENCH_N ?? 300);
const WARMUP = 30;

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] as number;
}

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function main(): Promise<void> {
  const env = new ServeEnv();
  writeFileSync(path.join(env.home, "pi.toml"), `image = ${JSON.stringify(IMAGE)}\n`);
  const pi = new FakePi(env.workspace);
  const ext = new KrunboxExtension(pi.api(), {
    env: { ...env.env, KRUNBOX_PI_CONFIG: path.join(env.home, "pi.toml") },
    findBinary: () => ({ path: SERVE_BIN, source: "KRUNBOX_BIN" }),
  });
  ext.register();
  await pi.emit("session_start", { reason: "startup" });
  const deadline = Date.now() + 120_000;
  while (!/ready/.test(pi.status())) {
    if (Date.now() > deadline || /blocked/.test(pi.status())) throw new Error(`sandbox not ready: ${pi.status()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const ctrl = (ext as unknown as { ctrl: { connection: ServeClient; ready(): { tools: { bash?: string; shell?: string } } } }).ctrl;
  const client = ctrl.connection;
  // The shell the extension's bash uses (bash when the image has it), so both sides run the same.
  const tools = ctrl.ready().tools;
  const shell = tools.bash ?? tools.shell ?? "/bin/sh";
  const name = sandboxName(env.workspace);
  const file = path.join(env.workspace, "small.txt");
  writeFileSync(file, "0123456789\n".repeat(10));

  const cases: { label: string; direct: () => Promise<unknown>; viaExt: () => Promise<unknown> }[] = [
    {
      label: "read of a 110-byte file",
      direct: () => client.request("fs.readFile", { sandbox: name, path: file }),
      viaExt: async () => {
        const r = await pi.call("read", { path: file });
        if (r.isError) throw new Error(r.text);
      },
    },
    {
      label: "bash `true`",
      direct: () => client.exec({ sandbox: name, argv: [shell, "-c", "true"] }),
      viaExt: async () => {
        const r = await pi.call("bash", { command: "true" });
        if (r.isError) throw new Error(r.text);
      },
    },
  ];

  const rows: string[] = [];
  for (const c of cases) {
    for (let i = 0; i < WARMUP; i++) {
      await c.direct();
      await c.viaExt();
    }
    const d: number[] = [];
    const e: number[] = [];
    for (let i = 0; i < N; i++) {
      d.push(await time(c.direct));
      e.push(await time(c.viaExt));
    }
    const md = quantile(d, 0.5);
    const me = quantile(e, 0.5);
    rows.push(
      `| ${c.label} | ${md.toFixed(3)} / ${quantile(d, 0.9).toFixed(3)} | ${me.toFixed(3)} / ${quantile(e, 0.9).toFixed(3)} | ${(me - md).toFixed(3)} | ${(me / md).toFixed(2)}× |`,
    );
  }
  await pi.emit("session_shutdown", { reason: "quit" });
  await (async () => {
    const c = await env.connect();
    await c.request("sandbox.stop", { name, remove: true });
    await c.close();
  })();
  await env.cleanup();

  console.log(`bench-pi: N=${N} per case, node ${process.versions.node}, server ${IS_STANDIN ? "stand-in (test/standin)" : SERVE_BIN}, shell ${shell}`);
  console.log("| operation | direct RPC median / p90 (ms) | through the extension median / p90 (ms) | added at the median (ms) | ratio |");
  console.log("|---|---|---|---|---|");
  for (const r of rows) console.log(r);
}

main().catch((err) => {
  console.error(`bench-pi: ${err instanceof Error ? err.stack : err}`);
  process.exit(1);
});
