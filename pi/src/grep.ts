// The grep tool in the sandbox. pi's own grep always spawns a host ripgrep, whatever
// operations it gets, so the extension replaces its execute: ripgrep in the guest when the
// image has it, otherwise the image's grep (busybox's will do) fed the file list by xargs.
// The output has the format of pi's grep: "path:line: text" for matches and
// "path-line- text" for context lines, paths relative to the searched directory.

import * as path from "node:path";
import { DEFAULT_MAX_BYTES, formatSize, truncateHead, truncateLine } from "@mariozechner/pi-coding-agent";
import { globMatcher, guestOutput, LineSplitter, listFilesArgv } from "./guest.ts";
import type { Ready } from "./sandbox.ts";

/** Parameters of pi's grep tool. */
export interface GrepParams {
  pattern: string;
  path?: string;
  glob?: string;
  ignoreCase?: boolean;
  literal?: boolean;
  context?: number;
  limit?: number;
}

/** One line of grep output. */
export interface GrepLine {
  file: string;
  line: number;
  text: string;
  match: boolean;
}

const DEFAULT_LIMIT = 100;
const GREP_MAX_LINE_LENGTH = 500;
/** Files per grep invocation in grep mode is left to xargs; this caps the listing. */
const MAX_FILES = 200_000;

/**
 * Collects lines until the match limit, keeping the trailing context of the last match.
 * Like pi's grep, it reports the limit as reached only when one more match proves it.
 */
export class MatchCollector {
  readonly lines: GrepLine[] = [];
  matches = 0;
  limitReached = false;
  private limitHit = false;
  private done = false;
  private trailingEnd = 0;
  private lastFile = "";

  constructor(
    private readonly limit: number,
    private readonly context: number,
  ) {}

  private push(l: GrepLine): void {
    this.lines.push(l);
    this.lastFile = l.file;
  }

  /** Add a line; returns false once no more lines are wanted. */
  add(l: GrepLine): boolean {
    if (this.done) return false;
    if (!this.limitHit) {
      this.push(l);
      if (l.match && ++this.matches >= this.limit) {
        this.limitHit = true;
        this.trailingEnd = l.line + this.context;
      }
      return true;
    }
    const inWindow = l.file === this.lastFile && l.line <= this.trailingEnd;
    if (inWindow) this.push({ ...l, match: false });
    if (l.match) this.limitReached = true;
    if (this.limitReached && !(inWindow && l.line < this.trailingEnd)) this.done = true;
    return !this.done;
  }
}

/** Parse one line of `rg --json` output. */
export function parseRgJson(line: string, cwd: string): GrepLine | undefined {
  let ev: { type?: string; data?: { path?: { text?: string; bytes?: string }; line_number?: number; lines?: { text?: string; bytes?: string } } };
  try {
    ev = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (ev.type !== "match" && ev.type !== "context") return undefined;
  const dec = (d?: { text?: string; bytes?: string }) =>
    typeof d?.text === "string" ? d.text : typeof d?.bytes === "string" ? Buffer.from(d.bytes, "base64").toString("utf8") : "";
  const file = dec(ev.data?.path);
  const n = ev.data?.line_number;
  if (!file || typeof n !== "number") return undefined;
  return { file: path.posix.resolve(cwd, file), line: n, text: dec(ev.data?.lines), match: ev.type === "match" };
}

/**
 * Parse one line of `grep -n -H` output ("file:N:text" for a match, "file-N-text" for
 * context) given the set of files grep was given, which settles where the name ends even
 * when it contains ':' or '-'.
 */
export function parseGrepLine(line: string, files: Set<string>): GrepLine | undefined {
  for (let i = line.indexOf("/", 0) === 0 ? 1 : 0; i < line.length; i++) {
    const c = line[i];
    if (c !== ":" && c !== "-") continue;
    const file = line.slice(0, i);
    if (!files.has(file)) continue;
    const m = /^(\d+)([:-])/.exec(line.slice(i + 1));
    if (!m || m[2] !== c) continue;
    return { file, line: Number(m[1]), text: line.slice(i + 1 + m[0].length), match: c === ":" };
  }
  return undefined;
}

/** Format collected lines as pi's grep tool does. */
export function formatGrep(
  c: MatchCollector,
  searchPath: string,
  isDirectory: boolean,
  limit: number,
): { content: { type: "text"; text: string }[]; details: Record<string, unknown> | undefined } {
  if (c.matches === 0) return { content: [{ type: "text", text: "No matches found" }], details: undefined };
  let linesTruncated = false;
  const rel = (f: string) => {
    if (isDirectory) {
      const r = path.posix.relative(searchPath, f);
      if (r && !r.startsWith("..")) return r;
    }
    return path.posix.basename(f);
  };
  const out = c.lines.map((l) => {
    const { text, wasTruncated } = truncateLine(l.text.replace(/\r?\n?$/, ""), GREP_MAX_LINE_LENGTH);
    if (wasTruncated) linesTruncated = true;
    return l.match ? `${rel(l.file)}:${l.line}: ${text}` : `${rel(l.file)}-${l.line}- ${text}`;
  });
  const truncation = truncateHead(out.join("\n"), { maxLines: Number.MAX_SAFE_INTEGER });
  let text = truncation.content;
  const details: Record<string, unknown> = {};
  const notices: string[] = [];
  if (c.limitReached) {
    notices.push(`${limit} matches limit reached. Use limit=${limit * 2} for more, or refine pattern`);
    details.matchLimitReached = limit;
  }
  if (truncation.truncated) {
    notices.push(`${formatSize(DEFAULT_MAX_BYTES)} limit reached`);
    details.truncation = truncation;
  }
  if (linesTruncated) {
    notices.push(`Some lines truncated to ${GREP_MAX_LINE_LENGTH} chars. Use read tool to see full lines`);
    details.linesTruncated = true;
  }
  if (notices.length) text += `\n\n[${notices.join(". ")}]`;
  return { content: [{ type: "text", text }], details: Object.keys(details).length ? details : undefined };
}

/** The argv of a ripgrep search (as pi's own grep builds it). */
export function rgArgv(rg: string, p: GrepParams, target: string, context: number): string[] {
  const args = [rg, "--no-config", "--json", "--line-number", "--color=never", "--hidden"];
  if (p.ignoreCase) args.push("--ignore-case");
  if (p.literal) args.push("--fixed-strings");
  if (p.glob) args.push("--glob", p.glob.replace(/^(!?)(?:\.\/)+/, "$1"));
  if (context > 0) args.push("--context", String(context));
  args.push("--", p.pattern, target);
  return args;
}

/** The argv of a grep search over files read NUL-separated from stdin. */
export function grepArgv(xargs: string, grep: string, p: GrepParams, context: number): string[] {
  // -s: quiet about unreadable files and directories reached through symlinks.
  const args = [xargs, "-0", grep, "-s", "-n", "-H"];
  if (p.ignoreCase) args.push("-i");
  args.push(p.literal ? "-F" : "-E");
  if (context > 0) args.push("-C", String(context));
  args.push("-e", p.pattern, "--");
  return args;
}

/**
 * Run a search in the sandbox. searchPath is absolute; isDirectory says whether it is a
 * directory (the caller stat'ed it).
 */
export async function guestGrep(r: Ready, p: GrepParams, searchPath: string, isDirectory: boolean, signal?: AbortSignal) {
  const context = p.context && p.context > 0 ? Math.min(Math.floor(p.context), 1_000_000) : 0;
  const limit = Math.max(1, Math.floor(p.limit ?? DEFAULT_LIMIT));
  const collector = new MatchCollector(limit, context);
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    if (r.tools.rg) {
      const cwd = isDirectory ? searchPath : path.posix.dirname(searchPath);
      const lines = new LineSplitter((line) => {
        const l = parseRgJson(line, cwd);
        if (l && !collector.add(l)) stop.abort();
      });
      const res = await guestOutput(r, rgArgv(r.tools.rg, p, isDirectory ? "." : searchPath, context), {
        cwd,
        signal: stop.signal,
        onStdout: (d) => lines.push(d),
      });
      lines.end();
      if (signal?.aborted) throw new Error("Operation aborted");
      if (!stop.signal.aborted && res.exitCode !== 0 && res.exitCode !== 1) {
        throw new Error(res.stderr.trim() || `ripgrep exited with code ${res.exitCode}`);
      }
    } else if (r.tools.grep && r.tools.xargs) {
      let files: string[];
      if (isDirectory) {
        const match = p.glob ? globMatcher(p.glob, searchPath) : () => true;
        const listed = await guestOutput(r, listFilesArgv(r, searchPath), { signal });
        files = listed.stdout.split("\n").filter((f) => f && match(f)).slice(0, MAX_FILES);
      } else {
        files = [searchPath];
      }
      if (files.length === 0) return formatGrep(collector, searchPath, isDirectory, limit);
      const known = new Set(files);
      const lines = new LineSplitter((line) => {
        if (line === "--") return;
        const l = parseGrepLine(line, known);
        if (l && !collector.add(l)) stop.abort();
      });
      const res = await guestOutput(r, grepArgv(r.tools.xargs, r.tools.grep, p, context), {
        stdin: Buffer.from(`${files.join("\0")}\0`),
        signal: stop.signal,
        onStdout: (d) => lines.push(d),
      });
      lines.end();
      if (signal?.aborted) throw new Error("Operation aborted");
      // xargs answers 123 when a grep found nothing in its batch; a real failure writes to stderr.
      if (!stop.signal.aborted && collector.matches === 0 && res.exitCode !== 0 && res.exitCode !== 1 && res.stderr.trim()) {
        throw new Error(res.stderr.trim().split("\n")[0]);
      }
    } else {
      throw new Error(`krunbox: the image ${r.status.image ?? ""} has neither rg nor grep and xargs, so grep cannot run in the sandbox`);
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
  return formatGrep(collector, searchPath, isDirectory, limit);
}
