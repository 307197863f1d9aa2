// Finding the krunbox executable: the one bundled in this package (by `make pi-package`),
// then $KRUNBOX_BIN, then krunbox on $PATH.

import { accessSync, constants } from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

/** Where the binary came from. */
export type BinarySource = "bundled" | "KRUNBOX_BIN" | "PATH";

export interface FoundBinary {
  path: string;
  source: BinarySource;
}

/** The package's root directory (where package.json is). */
export const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Where `make pi-package` puts the binary for a platform, e.g. bin/linux-x64/krunbox. */
export function bundledPath(root = PACKAGE_ROOT, platform = process.platform, arch = process.arch): string {
  return path.join(root, "bin", `${platform}-${arch}`, "krunbox");
}

function executable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Find krunbox, or throw an Error saying where it looked and what to do. */
export function findKrunbox(env: NodeJS.ProcessEnv = process.env, root = PACKAGE_ROOT): FoundBinary {
  const bundled = bundledPath(root);
  if (executable(bundled)) return { path: bundled, source: "bundled" };
  const fromEnv = env.KRUNBOX_BIN;
  if (fromEnv) {
    if (executable(fromEnv)) return { path: path.resolve(fromEnv), source: "KRUNBOX_BIN" };
    throw new Error(`KRUNBOX_BIN=${fromEnv} is not an executable file`);
  }
  for (const dir of (env.PATH ?? "").split(path.delimiter)) {
    if (!dir) continue;
    const p = path.join(dir, "krunbox");
    if (executable(p)) return { path: p, source: "PATH" };
  }
  throw new Error(`krunbox not found: not bundled (${bundled}), KRUNBOX_BIN unset, not on PATH; install krunbox or set KRUNBOX_BIN`);
}

/** The binary's path and where it came from, for the user: "/x/krunbox (from KRUNBOX_BIN)". */
export function describeBinary(b: FoundBinary): string {
  const from = { bundled: "bundled with pi-krunbox", KRUNBOX_BIN: "from KRUNBOX_BIN", PATH: "found on PATH" }[b.source];
  return `${b.path} (${from})`;
}
