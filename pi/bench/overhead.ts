// Tool-call overhead added by the extension on a ready sandbox: a small `read` and a
// `bash` of `true` through the extension (tool_call gate, pi's own tool definition, the
// extension's operations, the RPC client, krunbox serve) against the same operation made
// directly, interleaved in one run, on the same sandbox:
//
// - hostapi: the Go agent client (hack/benchpi: Client.ReadFile, Client.Run of the same
//   SHELL -c true), the baseline: what a Go program pays;
// - serve RPC: the same request sent directly on the extension's krunbox serve connection.
//
// Server: KRUNBOX_SERVE_BIN (default: the stand-in, a TypeScript process that runs commands
// on the host: then there is no hostapi baseline). KRUNBOX_BENCH_BASELINE names the built
// hack/benchpi. Medians and p90 in ms.
//
//   make bench-pi                      # from the repository root
//   BENCH_N=1000 make bench-pi

import { spawn } from "node:child_process";
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
  // two minutes to start, scaled on slow machines (hack/realvm's nested real VMs)
  const deadline = Date.now() + 120_000 * (Number(process.env.KRUNBOX_E2E_TIME_SCALE) || 1);
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

  const baseline = process.env.KRUNBOX_BENCH_BASELINE && !IS_STANDIN ? new Baseline(process.env.KRUNBOX_BENCH_BASELINE, name, env.env) : undefined;
  const cases: { label: string; go: string; direct: () => Promise<unknown>; viaExt: () => Promise<unknown> }[] = [
    {
      label: "read of a 110-byte file",
      go: `read ${file}`,
      direct: () => client.request("fs.readFile", { sandbox: name, path: file }),
      viaExt: async () => {
        const r = await pi.call("read", { path: file });
        if (r.isError) throw new Error(r.text);
      },
    },
    {
      label: "bash `true`",
      go: `run ${shell} -c true`,
      direct: () => client.exec({ sandbox: name, argv: [shell, "-c", "true"] }),
      viaExt: async () => {
        const r = await pi.call("bash", { command: "true" });
        if (r.isError) throw new Error(r.text);
      },
    },
  ];

  const ms = (xs: number[], q: number) => quantile(xs, q).toFixed(3);
  const rows: string[] = [];
  for (const c of cases) {
    for (let i = 0; i < WARMUP; i++) {
      await baseline?.time(c.go);
      await c.direct();
      await c.viaExt();
    }
    const g: number[] = [];
    const d: number[] = [];
    const e: number[] = [];
    // The three sides take turns going first, so that none pays more than its share for
    // coming right after another (the guest's reaping, the scheduler).
    const sides = [async () => baseline && g.push(await baseline.time(c.go)), async () => d.push(await time(c.direct)), async () => e.push(await time(c.viaExt))];
    for (let i = 0; i < N; i++) {
      for (let k = 0; k < sides.length; k++) await sides[(i + k) % sides.length]?.();
    }
    const base = baseline ? g : d;
    const added = quantile(e, 0.5) - quantile(base, 0.5);
    rows.push(
      `| ${c.label} | ${baseline ? `${ms(g, 0.5)} / ${ms(g, 0.9)}` : "n/a"} | ${ms(d, 0.5)} / ${ms(d, 0.9)} | ${ms(e, 0.5)} / ${ms(e, 0.9)} | **${added.toFixed(3)}** | ${(quantile(e, 0.5) / quantile(base, 0.5)).toFixed(2)}× |`,
    );
  }
  await baseline?.close();
  await pi.emit("session_shutdown", { reason: "quit" });
  await env.cleanup();

  console.log(
    `bench-pi: N=${N} per case, interleaved; node ${process.versions.node}, pi 0.73.1's tool definitions; server ${IS_STANDIN ? "stand-in (test/standin)" : SERVE_BIN}; image ${IMAGE}; shell ${shell}`,
  );
  console.log(`added = through the extension − ${baseline ? "hostapi (Go)" : "serve RPC"}, at the median`);
  console.log("| operation | hostapi (Go) median / p90 (ms) | serve RPC median / p90 (ms) | through the extension median / p90 (ms) | added (ms) | ratio |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows) console.log(r);
}

/** hack/benchpi: times hostapi calls on request, one at a time. */
class Baseline {
  private readonly child;
  private buf = "";
  private waiting: { resolve: (line: string) => void; reject: (err: Error) => void } | undefined;
  private exited: Error | undefined;

  constructor(bin: string, sandbox: string, env: NodeJS.ProcessEnv) {
    this.child = spawn(bin, [sandbox], { env, stdio: ["pipe", "pipe", "inherit"] });
    this.child.stdout.setEncoding("utf8");
    this.child.stdout.on("data", (d: string) => {
      this.buf += d;
      const nl = this.buf.indexOf("\n");
      if (nl < 0 || !this.waiting) return;
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve(line);
    });
    this.child.on("exit", (code) => {
      this.exited = new Error(`${bin} exited with code ${code}`);
      this.waiting?.reject(this.exited);
    });
  }

  /** Run one request; resolves with the time hostapi took, in ms. */
  time(request: string): Promise<number> {
    if (this.exited) return Promise.reject(this.exited);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve: (line) => resolve(Number(line) / 1e6), reject };
      this.child.stdin.write(`${request}\n`);
    });
  }

  async close(): Promise<void> {
    this.child.stdin.end();
    if (!this.exited) await new Promise((r) => this.child.once("exit", r));
  }
}

main().catch((err) => {
  console.error(`bench-pi: ${err instanceof Error ? err.stack : err}`);
  process.exit(1);
});
