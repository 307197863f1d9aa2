// The project a pi session works in, and the name of its sandbox.

import { createHash } from "node:crypto";
import { statSync } from "node:fs";
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
