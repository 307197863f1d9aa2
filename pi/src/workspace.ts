// The project a pi session works in, and the name of its sandbox.

import { createHash } from "node:crypto";
import { realpathSync, statSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/**
 * The workspace of a session started in cwd: the nearest directory at or above cwd that
 * holds a .git (a directory, or a file for worktrees and submodules), else cwd itself.
 * The path is kept as pi sees it (not resolved through symlinks): the guest mounts it at
 * the same path, so the paths in tool calls work unchanged.
 */
export function findWorkspace(cwd: string): string {
  const start = path.resolve(cwd);
  for (let dir = start; ; ) {
    try {
      statSync(path.join(dir, ".git"));
      return dir;
    } catch {
      // keep looking
    }
    const parent = path.dirname(dir);
    if (parent === dir) return start;
    dir = parent;
  }
}

/**
 * The sandbox name for a workspace: pi-<base>-<hash>, where <base> is the directory's
 * name reduced to [a-z0-9-] (at most 24 characters) and <hash> the first 8 hex digits of
 * the SHA-256 of the absolute path (docs/serve-protocol.md §8).
 */
export function sandboxName(workspace: string): string {
  const abs = path.resolve(workspace);
  const base =
    path
      .basename(abs)
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-+|-+$/g, "")
      .slice(0, 24)
      .replace(/-+$/, "") || "ws";
  const hash = createHash("sha256").update(abs).digest("hex").slice(0, 8);
  return `pi-${base}-${hash}`;
}

/**
 * The sandbox name of a pi session's isolated workspace: sandboxName(workspace), then "-"
 * and the first 8 hex digits of the SHA-256 of the session's id, so that the session finds
 * its checkout again when it resumes, and two sessions of one project have one each.
 */
export function isolatedSandboxName(workspace: string, sessionId: string): string {
  return `${sandboxName(workspace)}-${createHash("sha256").update(sessionId).digest("hex").slice(0, 8)}`;
}

/**
 * Directories that are never a project: the system's own, and those that hold the homes of
 * every user (macOS's included). Mounting one read-write would hand the VM what the sandbox
 * is there to protect. Their subdirectories are fine (/tmp/x, /opt/app, /usr/local/src/x).
 */
const SYSTEM_DIRS = new Set([
  "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt", "/proc",
  "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
  "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/sbin", "/usr/share", "/usr/src",
  "/var/lib", "/var/log", "/var/tmp",
  "/Applications", "/Library", "/System", "/Users", "/Volumes", "/private", "/private/etc", "/private/tmp", "/private/var",
]);

/** Pseudo file systems: nothing under them is a project. */
const PSEUDO = /^\/(proc|sys|dev)(\/|$)/;

function realOrResolved(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

function whyRefused(dir: string, homes: Set<string>): string | undefined {
  if (dir === path.parse(dir).root) return "the root directory";
  for (const home of homes) {
    if (dir === home) return "your home directory";
    if (home.startsWith(dir + path.sep)) return `it holds your home directory ${home}`;
  }
  if (SYSTEM_DIRS.has(dir) || PSEUDO.test(dir)) return "a system directory";
  return undefined;
}

/**
 * Why a workspace must not be mounted into the sandbox, or undefined: it is /, the home
 * directory ($HOME, else the user's), a directory above it (/home), or a system directory
 * (/etc, /usr, /tmp itself...). Both paths are judged as given and with symlinks resolved,
 * so a link to one of them is refused too.
 */
export function refusedWorkspace(workspace: string, env: NodeJS.ProcessEnv): string | undefined {
  const given = path.resolve(workspace);
  const real = realOrResolved(given);
  const home = path.resolve(env.HOME || os.homedir());
  const homes = new Set([home, realOrResolved(home)]);
  for (const dir of new Set([given, real])) {
    const why = whyRefused(dir, homes);
    if (why) {
      const via = real === given ? "" : `: it is ${real}`;
      return `refusing to mount ${given} (${why}${via}) into the sandbox: start pi in a project directory, or /krunbox off`;
    }
  }
  return undefined;
}
