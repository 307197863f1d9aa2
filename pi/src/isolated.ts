// /krunbox diff, export, land and workspaces: the review of an isolated workspace
// (workspace = "isolated"), by the krunbox CLI, which reads the sandbox's repository
// itself (nothing of it runs on the host).

import { execFile } from "node:child_process";
import * as path from "node:path";

/** What the commands need of the extension. */
export interface IsolatedHost {
  /** The krunbox binary and its environment. */
  bin: string;
  env: NodeJS.ProcessEnv;
  /** The project and the session's sandbox. */
  workspace: string;
  name: string;
  /** pi's working directory, against which relative paths are taken. */
  cwd: string;
  /** Asks the user; undefined without a UI. */
  confirm?: (title: string, message: string) => Promise<boolean>;
  say: (text: string, level?: "info" | "warning" | "error") => void;
}

/** The result of one krunbox run. */
interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function krunbox(h: IsolatedHost, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(h.bin, args, { env: h.env, cwd: h.workspace, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === "number" ? ((err as { code: number }).code) : 1) : 0;
      resolve({ code, stdout, stderr: stderr || (err && code === 1 && !stderr ? String(err.message) : "") });
    });
  });
}

function failed(h: IsolatedHost, what: string, r: Run): void {
  h.say(`krunbox: ${what} failed: ${(r.stderr || r.stdout).trim()}`, "error");
}

/** Splits the words of a command line into flags (--x) and the rest. */
function parse(words: string[]): { flags: Set<string>; to?: string; rest: string[] } {
  const flags = new Set<string>();
  const rest: string[] = [];
  let to: string | undefined;
  for (let i = 0; i < words.length; i++) {
    const w = words[i] as string;
    if (w === "--to") to = words[++i];
    else if (w.startsWith("--to=")) to = w.slice(5);
    else if (w.startsWith("--")) flags.add(w);
    else rest.push(w);
  }
  return { flags, to, rest };
}

/** Asks for confirmation unless --yes; without a UI --yes is required. */
async function confirmed(h: IsolatedHost, yes: boolean, title: string, message: string): Promise<boolean> {
  if (yes) return true;
  if (!h.confirm) {
    h.say(`krunbox: ${title} needs a confirmation, and there is no UI to ask: add --yes`, "error");
    return false;
  }
  if (await h.confirm(title, message)) return true;
  h.say(`krunbox: ${title} cancelled`);
  return false;
}

/** Runs /krunbox diff|export|land|workspaces with words after the subcommand. */
export async function isolatedCommand(h: IsolatedHost, sub: string, words: string[]): Promise<void> {
  const { flags, to, rest } = parse(words);
  const abs = (p: string) => path.resolve(h.cwd, p);
  switch (sub) {
    case "diff": {
      const r = await krunbox(h, ["diff", ...(flags.has("--stat") ? ["--stat"] : []), h.name, ...rest.map(abs)]);
      if (r.code !== 0) return failed(h, "diff", r);
      return h.say(r.stdout.trim() || `krunbox: no changes in ${h.name} against its base`);
    }
    case "export": {
      if (!to || rest.length === 0) return h.say("krunbox: usage: /krunbox export PATH... --to DIR [--yes]", "error");
      const dir = abs(to);
      if (!(await confirmed(h, flags.has("--yes"), "krunbox export", `Copy ${rest.join(", ")} of the isolated workspace ${h.name} into the new directory ${dir}?`))) return;
      const r = await krunbox(h, ["export", h.name, ...rest.map(abs), "--to", dir]);
      if (r.code !== 0) return failed(h, "export", r);
      return h.say(r.stdout.trim());
    }
    case "land": {
      const stat = await krunbox(h, ["diff", "--stat", h.name]);
      if (stat.code !== 0) return failed(h, "land", stat);
      if (!stat.stdout.trim()) return h.say(`krunbox: nothing to land: ${h.name} has no changes against its base`);
      const squash = flags.has("--squash");
      const message = `Make the work of ${h.name} the branch krunbox/${h.name} of ${h.workspace}${squash ? " (one commit)" : ""}? Nothing is merged.\n\n${stat.stdout}`;
      if (!(await confirmed(h, flags.has("--yes"), "krunbox land", message))) return;
      const r = await krunbox(h, ["land", ...(squash ? ["--squash"] : []), h.name]);
      if (r.code !== 0) return failed(h, "land", r);
      return h.say(r.stdout.trim());
    }
    case "workspaces": {
      if (rest[0] === "rm") {
        const name = rest[1];
        if (!name) return h.say("krunbox: usage: /krunbox workspaces rm NAME [--yes]", "error");
        const list = await krunbox(h, ["workspaces", "--json", "--project", h.workspace]);
        if (list.code !== 0) return failed(h, "workspaces", list);
        if (!(JSON.parse(list.stdout) as { name: string }[]).some((w) => w.name === name)) {
          return h.say(`krunbox: ${name} is no isolated workspace of ${h.workspace}`, "error");
        }
        const current = name === h.name ? " It is this session's own: its tools stop working until /krunbox restart." : "";
        if (!(await confirmed(h, flags.has("--yes"), "krunbox workspaces rm", `Remove the isolated workspace ${name} and its checkout? Work not landed is lost.${current}`))) return;
        const r = await krunbox(h, ["rm", "-f", name]);
        if (r.code !== 0) return failed(h, "rm", r);
        return h.say(`krunbox: removed ${name}`);
      }
      const r = await krunbox(h, ["workspaces", "--project", h.workspace]);
      if (r.code !== 0) return failed(h, "workspaces", r);
      return h.say(r.stdout.trim());
    }
  }
}

/** The subcommands isolatedCommand runs. */
export const ISOLATED_COMMANDS = ["diff", "export", "land", "workspaces"];
