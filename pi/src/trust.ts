// Whether pi's project trust is a decision or a default.
//
// pi 1.x's ctx.isProjectTrusted() is true for every project that holds none of the
// resources pi itself guards (.pi/settings.json, .pi/extensions, ...): with nothing to
// decide, pi trusts by default (core/project-trust.js, resolveProjectTrusted). A
// repository with only .pi/krunbox.toml would then be "trusted" and could widen its own
// sandbox. So krunbox counts pi's trust only when pi decided something for this project:
// the user passed --approve, or the project has resources that made pi decide (by asking,
// by defaultProjectTrust, or by an extension), or trust.json holds a saved "true" for it.
//
// pi's answer is about its working directory; krunbox reads the project file of the
// workspace (the git root above it). So pi's answer counts only when the two are one
// directory; from a subdirectory only a decision saved for the workspace itself counts.

import { existsSync, readFileSync, realpathSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** The entries of <project>/.pi that make pi 1.x decide trust (pi's trust-manager.js). */
const GUARDED = ["settings.json", "mcp.json", "extensions", "skills", "prompts", "themes", "SYSTEM.md", "APPEND_SYSTEM.md"];

function canonical(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

/** Whether pi 1.x had to decide trust for cwd (it holds resources pi guards). */
export function hasGuardedResources(cwd: string, home = os.homedir()): boolean {
  const dir = canonical(cwd);
  if (GUARDED.some((e) => existsSync(path.join(dir, ".pi", e)))) return true;
  const userSkills = path.join(canonical(home), ".agents", "skills");
  for (let d = dir; ; ) {
    const skills = path.join(d, ".agents", "skills");
    if (skills !== userSkills && existsSync(skills)) return true;
    const parent = path.dirname(d);
    if (parent === d) return false;
    d = parent;
  }
}

/** The nearest saved decision for cwd in pi's trust.json, or undefined. */
export function savedTrust(cwd: string, agentDir: string): boolean | undefined {
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(readFileSync(path.join(agentDir, "trust.json"), "utf8").replace(/^\uFEFF/, ""));
  } catch {
    return undefined;
  }
  if (typeof data !== "object" || data === null) return undefined;
  for (let d = canonical(cwd); ; ) {
    const v = data[d];
    if (v === true || v === false) return v;
    const parent = path.dirname(d);
    if (parent === d) return undefined;
    d = parent;
  }
}

/** pi's agent directory: $PI_CODING_AGENT_DIR or ~/.pi/agent. */
export function piAgentDir(env: NodeJS.ProcessEnv): string {
  return env.PI_CODING_AGENT_DIR || path.join(env.HOME || os.homedir(), ".pi", "agent");
}

/**
 * Whether pi's "trusted" for cwd is a decision rather than its default: --approve on the
 * command line, guarded resources in the project, or a saved true in trust.json.
 */
export function piTrustIsDecision(cwd: string, env: NodeJS.ProcessEnv, argv: string[]): boolean {
  if (argv.includes("--approve") || argv.includes("-a")) return true;
  if (hasGuardedResources(cwd, env.HOME || os.homedir())) return true;
  return savedTrust(cwd, piAgentDir(env)) === true;
}

/** Inputs of workspaceTrust. */
export interface TrustQuestion {
  /** What ctx.isProjectTrusted() said; undefined when pi has no such thing (0.73). */
  piSays: boolean | undefined;
  /** pi's working directory, which piSays is about. */
  cwd: string;
  /** The workspace, whose .pi/krunbox.toml is read. */
  workspace: string;
  env: NodeJS.ProcessEnv;
  argv: string[];
}

/**
 * Whether pi trusts the workspace's project file (undefined: pi cannot say), and why, in
 * words for /krunbox config.
 */
export function workspaceTrust(q: TrustQuestion): { trusted: boolean | undefined; note: string } {
  if (q.piSays === undefined) return { trusted: undefined, note: "pi 0.73 has no project trust" };
  const ws = canonical(q.workspace);
  if (canonical(q.cwd) !== ws) {
    if (savedTrust(ws, piAgentDir(q.env)) === true) return { trusted: true, note: `pi: a saved decision trusts the workspace ${ws}` };
    return {
      trusted: false,
      note: `pi's trust is about ${q.cwd}, not the workspace ${ws} whose project file is read: not counted (start pi in ${ws}, or list it in trusted_projects)`,
    };
  }
  if (!q.piSays) return { trusted: false, note: "pi: not trusted" };
  if (piTrustIsDecision(q.cwd, q.env, q.argv)) return { trusted: true, note: "pi: trusted" };
  return { trusted: false, note: "pi: trusted by default only (no .pi resources of its own, no --approve, nothing saved): not counted" };
}
