// Configuration of the pi extension: TOML files and environment variables, layered
// defaults < user file < project file < environment < flags. The project file comes from
// the repository, so unless pi (or the user) trusts the project it may only narrow what
// the sandbox can reach, never widen it.

import { closeSync, constants as fsc, fstatSync, openSync, readSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parse as parseToml } from "smol-toml";

/** A host directory mounted into the sandbox besides the workspace. */
export interface MountConfig {
  host: string;
  /** Guest path; the host path when absent. */
  guest?: string;
  read_only: boolean;
}

/**
 * A secret ([[secrets]]): the guest sees the variable env set to a placeholder, which the
 * host replaces with the value read from value ("$ENV:HOST_VAR" or "$FILE:/path", read by
 * krunbox at each start, never by the guest) only in HTTP(S) requests to allow_hosts.
 */
export interface SecretConfig {
  env: string;
  value: string;
  allow_hosts: string[];
}

/** The effective configuration. Keys are the TOML keys. */
export interface KrunboxConfig {
  /** false: tools run on the host (labelled), as after /krunbox off. */
  enabled: boolean;
  image: string;
  pull: "missing" | "always" | "never";
  cpus: number;
  memory_mib: number;
  /** "public" (default), "allow=RULE,...", "open", "tsi" or "none" (krunbox --net). */
  network: string;
  /** Stop the VM after this long without tool calls; 0 = never. */
  idle_timeout_sec: number;
  /** Stop the sandbox when pi exits (default: keep it for the next session). */
  stop_on_exit: boolean;
  /** How long a tool call waits for the sandbox to start. */
  start_timeout_sec: number;
  /**
   * How long a file call, or the start of a command, may go without an answer before the
   * sandbox's health is checked (a running command has its own timeout).
   */
  call_timeout_sec: number;
  /** How long that health check waits; no answer marks the sandbox unresponsive. */
  health_timeout_sec: number;
  /** "auto" (bash when the image has it, else /bin/sh) or an absolute guest path. */
  shell: string;
  /** "host": when the sandbox cannot start, run tools on the host, labelled. */
  fallback: "none" | "host";
  /** Tools of other extensions allowed to run (on the host) while sandboxed. */
  pass_through_tools: string[];
  /** Environment set in the guest for every command. */
  env: Record<string, string>;
  /** Names of host environment variables copied into the guest. */
  env_passthrough: string[];
  mounts: MountConfig[];
  /** Secrets the guest may use without holding them (user file or a trusted project). */
  secrets: SecretConfig[];
  /** Workspaces whose project file is trusted (user file only). */
  trusted_projects: string[];
  /**
   * "live": the project itself is the VM's workspace. "isolated": each pi session gets its
   * own checkout of the project's HEAD (branch krunbox/NAME), reused when the session
   * resumes; /krunbox diff, export and land take its work out.
   */
  workspace: "live" | "isolated";
}

export type ConfigKey = keyof KrunboxConfig;

/** The defaults. */
export const DEFAULTS: Readonly<KrunboxConfig> = Object.freeze({
  enabled: true,
  image: "docker.io/library/debian:stable-slim",
  pull: "missing",
  cpus: 2,
  memory_mib: 2048,
  network: "public",
  idle_timeout_sec: 1800,
  stop_on_exit: false,
  start_timeout_sec: 120,
  call_timeout_sec: 30,
  health_timeout_sec: 5,
  shell: "auto",
  fallback: "none",
  pass_through_tools: [],
  env: {},
  env_passthrough: [],
  mounts: [],
  secrets: [],
  trusted_projects: [],
  workspace: "live",
});

type Kind = "bool" | "string" | "int" | "list" | "map" | "mounts" | "secrets";

const KINDS: Record<ConfigKey, Kind> = {
  enabled: "bool",
  image: "string",
  pull: "string",
  cpus: "int",
  memory_mib: "int",
  network: "string",
  idle_timeout_sec: "int",
  stop_on_exit: "bool",
  start_timeout_sec: "int",
  call_timeout_sec: "int",
  health_timeout_sec: "int",
  shell: "string",
  fallback: "string",
  pass_through_tools: "list",
  env: "map",
  env_passthrough: "list",
  mounts: "mounts",
  secrets: "secrets",
  trusted_projects: "list",
  workspace: "string",
};

const ENUMS: Partial<Record<ConfigKey, readonly string[]>> = {
  pull: ["missing", "always", "never"],
  fallback: ["none", "host"],
  workspace: ["live", "isolated"],
};

const MINIMUM: Partial<Record<ConfigKey, number>> = {
  cpus: 1,
  memory_mib: 128,
  idle_timeout_sec: 0,
  start_timeout_sec: 1,
  call_timeout_sec: 1,
  health_timeout_sec: 1,
};

/** A configuration value that cannot be used; the extension blocks tools and shows it. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** The values one layer sets. */
export type Layer = Partial<KrunboxConfig>;

/** The result of loadConfig. */
export interface LoadedConfig {
  config: KrunboxConfig;
  /** Where each key's value came from: "default", "user <file>", "project <file>", "env NAME", "flag --name". */
  sources: Record<ConfigKey, string>;
  /** Things ignored: unknown keys, project settings refused because they would widen. */
  warnings: string[];
  userFile: string;
  projectFile: string;
  /** Whether the project file was applied as trusted. */
  projectTrusted: boolean;
  /**
   * Whether the image comes from the user: the default, their file, environment or flags,
   * or a trusted project's file. krunbox serve takes a local image source (oci:,
   * docker-archive:) only then.
   */
  imageTrusted: boolean;
  /** Why, in words. */
  trustNote: string;
}

function expandHome(p: string): string {
  if (p === "~") return os.homedir();
  if (p.startsWith("~/")) return path.join(os.homedir(), p.slice(2));
  return p;
}

/** Prefixes of the image references that name a local source rather than a registry. */
export const LOCAL_IMAGE_PREFIXES = ["oci:", "docker-archive:"] as const;

/** Whether an image reference names a local source: an OCI layout or a docker-archive tarball. */
export function isLocalImage(ref: string): boolean {
  return LOCAL_IMAGE_PREFIXES.some((p) => ref.startsWith(p));
}

/**
 * A local image reference with its PATH made absolute against base (the directory of the
 * file that names it, or the directory pi started in for the environment and flags), so
 * that krunbox serve, which refuses relative ones, never resolves it against the
 * workspace. Other references are returned as they are. PATH ends at the first ':'.
 */
export function absoluteImage(ref: string, base: string): string {
  const prefix = LOCAL_IMAGE_PREFIXES.find((p) => ref.startsWith(p));
  if (!prefix) return ref;
  const rest = ref.slice(prefix.length);
  const i = rest.indexOf(":");
  const p = i < 0 ? rest : rest.slice(0, i);
  if (p === "" || path.isAbsolute(p)) return ref;
  return prefix + path.resolve(base, expandHome(p)) + (i < 0 ? "" : rest.slice(i));
}

function checkValue(key: ConfigKey, value: unknown, origin: string): unknown {
  const where = `${origin}: ${key}`;
  switch (KINDS[key]) {
    case "bool":
      if (typeof value !== "boolean") throw new ConfigError(`${where}: want true or false, got ${JSON.stringify(value)}`);
      return value;
    case "string": {
      if (key === "network" && typeof value === "object" && value !== null && !Array.isArray(value)) value = networkTable(value as Record<string, unknown>, where);
      if (typeof value !== "string" || value === "") throw new ConfigError(`${where}: want a non-empty string, got ${JSON.stringify(value)}`);
      const allowed = ENUMS[key];
      if (allowed && !allowed.includes(value)) throw new ConfigError(`${where}: want one of ${allowed.join(", ")}, got ${JSON.stringify(value)}`);
      if (key === "network" && !validNetwork(value)) {
        throw new ConfigError(`${where}: want public, allow=RULE,..., open, tsi or none, got ${JSON.stringify(value)}`);
      }
      if (key === "shell" && value !== "auto" && !path.posix.isAbsolute(value)) {
        throw new ConfigError(`${where}: want "auto" or an absolute guest path, got ${JSON.stringify(value)}`);
      }
      return value;
    }
    case "int": {
      const n = typeof value === "bigint" ? Number(value) : value;
      if (typeof n !== "number" || !Number.isInteger(n)) throw new ConfigError(`${where}: want an integer, got ${JSON.stringify(value)}`);
      const min = MINIMUM[key] ?? 0;
      if (n < min) throw new ConfigError(`${where}: want at least ${min}, got ${n}`);
      return n;
    }
    case "list":
      if (!Array.isArray(value) || value.some((v) => typeof v !== "string" || v === "")) {
        throw new ConfigError(`${where}: want a list of non-empty strings`);
      }
      return [...new Set(value as string[])];
    case "map": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw new ConfigError(`${where}: want a table of strings`);
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries(value)) {
        if (typeof v !== "string") throw new ConfigError(`${where}.${k}: want a string`);
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new ConfigError(`${where}.${k}: not a valid environment variable name`);
        out[k] = v;
      }
      return out;
    }
    case "mounts": {
      if (!Array.isArray(value)) throw new ConfigError(`${where}: want an array of tables ([[mounts]])`);
      return value.map((m, i) => {
        if (typeof m !== "object" || m === null) throw new ConfigError(`${where}[${i}]: want a table`);
        const r = m as Record<string, unknown>;
        for (const k of Object.keys(r)) {
          if (!["host", "guest", "read_only"].includes(k)) throw new ConfigError(`${where}[${i}].${k}: unknown key (want host, guest, read_only)`);
        }
        if (typeof r.host !== "string") throw new ConfigError(`${where}[${i}].host: want a path`);
        const host = path.normalize(expandHome(r.host));
        if (!path.isAbsolute(host)) throw new ConfigError(`${where}[${i}].host ${r.host}: want an absolute path (or ~/...)`);
        let guest: string | undefined;
        if (r.guest !== undefined) {
          if (typeof r.guest !== "string" || !path.posix.isAbsolute(r.guest)) throw new ConfigError(`${where}[${i}].guest: want an absolute guest path`);
          guest = path.posix.normalize(r.guest);
        }
        if (r.read_only !== undefined && typeof r.read_only !== "boolean") throw new ConfigError(`${where}[${i}].read_only: want true or false`);
        return { host, ...(guest && guest !== host ? { guest } : {}), read_only: r.read_only === true };
      });
    }
    case "secrets": {
      if (!Array.isArray(value)) throw new ConfigError(`${where}: want an array of tables ([[secrets]])`);
      const names = new Set<string>();
      return value.map((sec, i) => {
        const at = `${where}[${i}]`;
        if (typeof sec !== "object" || sec === null) throw new ConfigError(`${at}: want a table`);
        const r = sec as Record<string, unknown>;
        for (const k of Object.keys(r)) {
          if (!["env", "value", "allow_hosts"].includes(k)) throw new ConfigError(`${at}.${k}: unknown key (want env, value, allow_hosts)`);
        }
        if (typeof r.env !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(r.env)) throw new ConfigError(`${at}.env: want a guest environment variable name`);
        if (names.has(r.env)) throw new ConfigError(`${at}.env: ${r.env} is given twice`);
        names.add(r.env);
        let v: string;
        if (typeof r.value === "string" && /^\$ENV:[A-Za-z_][A-Za-z0-9_]*$/.test(r.value)) {
          v = r.value;
        } else if (typeof r.value === "string" && r.value.startsWith("$FILE:")) {
          const file = path.normalize(expandHome(r.value.slice("$FILE:".length)));
          if (!path.isAbsolute(file)) throw new ConfigError(`${at}.value ${r.value}: want an absolute path (or ~/...)`);
          v = "$FILE:" + file;
        } else {
          throw new ConfigError(`${at}.value: want "$ENV:HOST_VAR" or "$FILE:/path" (the value itself never goes in a file)`);
        }
        const hosts = r.allow_hosts;
        if (!Array.isArray(hosts) || hosts.length === 0 || hosts.some((h) => typeof h !== "string" || h === "")) {
          throw new ConfigError(`${at}.allow_hosts: want a non-empty list of host names (api.example.com, *.example.com)`);
        }
        return { env: r.env, value: v, allow_hosts: [...new Set(hosts as string[])] };
      });
    }
  }
}

/** The source of a secret's value as krunbox takes it: env:VAR or file:PATH. */
export function secretSource(value: string): string {
  return value.startsWith("$ENV:") ? "env:" + value.slice("$ENV:".length) : "file:" + value.slice("$FILE:".length);
}

/** Check a parsed TOML document (or any object) as one layer. Unknown keys become warnings. */
export function parseLayer(doc: Record<string, unknown>, origin: string, warnings: string[]): Layer {
  const layer: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(doc)) {
    if (!(key in KINDS)) {
      warnings.push(`${origin}: unknown key ${key} (ignored)`);
      continue;
    }
    layer[key] = checkValue(key as ConfigKey, value, origin);
  }
  return layer as Layer;
}

/** The largest configuration file read: a project's file comes from the repository. */
export const MAX_CONFIG_BYTES = 1 << 20;

/**
 * Read a configuration file that a repository may have planted: opened without blocking (a
 * FIFO would hang pi forever), refused unless it is a regular file, and bounded in size.
 */
export function readBoundedFile(file: string, max = MAX_CONFIG_BYTES): string {
  const fd = openSync(file, fsc.O_RDONLY | fsc.O_NONBLOCK | fsc.O_NOCTTY);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`not a regular file`);
    if (st.size > max) throw new Error(`${st.size} bytes, more than the ${max} read`);
    const buf = Buffer.alloc(max + 1);
    let n = 0;
    for (let r; n < buf.length && (r = readSync(fd, buf, n, buf.length - n, null)) > 0; ) n += r;
    if (n > max) throw new Error(`more than the ${max} bytes read`);
    return buf.subarray(0, n).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** Read and check a TOML file; a missing file is an empty layer. */
export function readLayerFile(file: string, origin: string, warnings: string[]): Layer {
  let text: string;
  try {
    text = readBoundedFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw new ConfigError(`${origin}: cannot read: ${(err as Error).message}`);
  }
  let doc: Record<string, unknown>;
  try {
    doc = parseToml(text) as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError(`${origin}: ${(err as Error).message.split("\n")[0]}`);
  }
  return parseLayer(doc, origin, warnings);
}

/** Prefix of the environment variables that set configuration keys: KRUNBOX_PI_IMAGE, ... */
export const ENV_PREFIX = "KRUNBOX_PI_";

/** The layer set by KRUNBOX_PI_<KEY> environment variables (lists comma-separated). */
export function envLayer(env: NodeJS.ProcessEnv, warnings: string[]): { layer: Layer; names: Partial<Record<ConfigKey, string>> } {
  const doc: Record<string, unknown> = {};
  const names: Partial<Record<ConfigKey, string>> = {};
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith(ENV_PREFIX) || raw === undefined || name === `${ENV_PREFIX}CONFIG`) continue;
    const key = name.slice(ENV_PREFIX.length).toLowerCase() as ConfigKey;
    const kind = KINDS[key];
    if (!kind || kind === "map" || kind === "mounts" || kind === "secrets" || key === "trusted_projects") {
      warnings.push(`env ${name}: not a setting that can come from the environment (ignored)`);
      continue;
    }
    names[key] = name;
    if (kind === "bool") {
      const v = raw.trim().toLowerCase();
      if (["1", "true", "yes", "on"].includes(v)) doc[key] = true;
      else if (["0", "false", "no", "off"].includes(v)) doc[key] = false;
      else throw new ConfigError(`env ${name}: want true or false, got ${JSON.stringify(raw)}`);
    } else if (kind === "int") {
      doc[key] = /^\s*\d+\s*$/.test(raw) ? Number(raw) : raw;
    } else if (kind === "list") {
      doc[key] = raw.split(",").map((s) => s.trim()).filter(Boolean);
    } else {
      doc[key] = raw;
    }
  }
  const layer: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(doc)) layer[key] = checkValue(key as ConfigKey, value, `env ${names[key as ConfigKey]}`);
  return { layer: layer as Layer, names };
}

/** The user's configuration file: $KRUNBOX_PI_CONFIG, else <krunbox config dir>/pi.toml. */
export function userConfigFile(env: NodeJS.ProcessEnv): string {
  if (env.KRUNBOX_PI_CONFIG) return env.KRUNBOX_PI_CONFIG;
  if (env.KRUNBOX_HOME) return path.join(env.KRUNBOX_HOME, "config", "pi.toml");
  const base = env.XDG_CONFIG_HOME || path.join(env.HOME || os.homedir(), ".config");
  return path.join(base, "krunbox", "pi.toml");
}

/** The project's configuration file. */
export function projectConfigFile(workspace: string): string {
  return path.join(workspace, ".pi", "krunbox.toml");
}

const REACH_ALLOW = 1;

/** How far a network setting reaches: none < allow= < public < open, tsi. */
export function networkReach(n: string): number {
  if (n === "none") return 0;
  if (n.startsWith("allow=")) return REACH_ALLOW;
  if (n === "public") return 2;
  return 3;
}

/** A network setting krunbox takes (the rules themselves are checked by krunbox). */
export function validNetwork(n: string): boolean {
  return ["none", "public", "open", "tsi"].includes(n) || /^allow=[^\s]+$/.test(n);
}

/**
 * The [network] table: `mode = "public" | "allow" | "open" | "tsi" | "none"`, and for
 * allow, `allow = ["registry.example.com", "*.example.com:443", "10.0.0.0/8"]`; the same
 * as network = "allow=registry.example.com,...".
 */
function networkTable(t: Record<string, unknown>, where: string): string {
  for (const k of Object.keys(t)) {
    if (k !== "mode" && k !== "allow") throw new ConfigError(`${where}.${k}: unknown key (want mode, allow)`);
  }
  const mode = t.mode ?? (t.allow !== undefined ? "allow" : undefined);
  if (typeof mode !== "string") throw new ConfigError(`${where}.mode: want public, allow, open, tsi or none`);
  if (mode !== "allow") {
    if (t.allow !== undefined) throw new ConfigError(`${where}.allow: only with mode = "allow"`);
    return mode;
  }
  const rules = t.allow;
  if (!Array.isArray(rules) || rules.length === 0 || rules.some((r) => typeof r !== "string" || r === "" || /[\s,]/.test(r))) {
    throw new ConfigError(`${where}.allow: want a non-empty list of rules (host names, *.domain, IPs, CIDRs, each optionally :PORT)`);
  }
  return `allow=${rules.join(",")}`;
}

function mountKey(m: MountConfig): string {
  return `${m.host}\u0000${m.guest ?? m.host}`;
}

/**
 * Apply an untrusted project layer over base: keep what narrows (or does not change
 * reach), refuse what widens, with a warning for each refusal.
 */
export function narrowProject(base: KrunboxConfig, project: Layer, origin: string, warnings: string[]): Layer {
  const out: Layer = {};
  const refuse = (key: string, why: string) =>
    warnings.push(`${origin}: ${key} ${why}: refused because the project is not trusted (trust it in pi, or list it in trusted_projects in your user file)`);
  for (const [k, v] of Object.entries(project) as [ConfigKey, never][]) {
    switch (k) {
      case "enabled":
        if (v === false) refuse("enabled = false", "would run tools on the host");
        else out.enabled = true;
        break;
      case "cpus":
      case "memory_mib":
        if ((v as number) > base[k]) refuse(`${k} = ${v}`, `is more than ${base[k]}`);
        else out[k] = v;
        break;
      case "network":
        if (networkReach(v as string) > networkReach(base.network) || (networkReach(v as string) === REACH_ALLOW && v !== base.network && base.network.startsWith("allow=")))
          refuse(`network = "${v}"`, `would widen the network (${base.network})`);
        else out.network = v;
        break;
      case "fallback":
        if (v === "host") refuse(`fallback = "host"`, "would run tools on the host");
        else out.fallback = v;
        break;
      case "workspace":
        if (v === "live" && base.workspace === "isolated") refuse(`workspace = "live"`, "would let the VM write your checkout");
        else out.workspace = v;
        break;
      case "pass_through_tools":
      case "env_passthrough": {
        const allowed = new Set(base[k]);
        const kept = (v as string[]).filter((x) => allowed.has(x));
        const extra = (v as string[]).filter((x) => !allowed.has(x));
        if (extra.length) refuse(`${k} ${extra.join(", ")}`, k === "env_passthrough" ? "would copy host variables into the VM" : "would let tools run on the host");
        out[k] = kept;
        break;
      }
      case "mounts": {
        const byHost = new Map(base.mounts.map((m) => [mountKey(m), m]));
        const kept: MountConfig[] = [];
        for (const m of v as MountConfig[]) {
          const b = byHost.get(mountKey(m));
          if (!b) refuse(`mount ${m.host}`, "is not one of your own mounts");
          else kept.push({ ...b, read_only: b.read_only || m.read_only });
        }
        out.mounts = kept;
        break;
      }
      case "trusted_projects":
        warnings.push(`${origin}: trusted_projects is only read from your user file (ignored)`);
        break;
      case "secrets":
        if ((v as SecretConfig[]).length) refuse(`secrets ${(v as SecretConfig[]).map((x) => x.env).join(", ")}`, "would send host secrets to hosts the project names");
        break;
      case "image":
        if (isLocalImage(v as string)) refuse(`image = ${JSON.stringify(v)}`, "is a local image source (oci:, docker-archive:), which only your own file, environment or flags may name");
        else out.image = v;
        break;
      default:
        (out as Record<string, unknown>)[k] = v;
    }
  }
  return out;
}

function isTrustedByUser(workspace: string, list: string[]): boolean {
  const ws = path.resolve(workspace);
  return list.some((p) => path.resolve(expandHome(p)) === ws);
}

/** Inputs of loadConfig. */
export interface LoadOptions {
  workspace: string;
  env: NodeJS.ProcessEnv;
  /** Flag values: "krunbox-image", "krunbox-network", "krunbox-off". */
  flags?: Record<string, string | boolean | undefined>;
  /** Whether pi trusts the project (1.x, see trust.ts); undefined on 0.73. */
  piTrustsProject?: boolean;
  /** How pi's trust was judged, for /krunbox config. */
  trustNote?: string;
  /** The directory pi started in: the base of a relative local image path in the environment or a flag. Default: process.cwd(). */
  cwd?: string;
}

/** Load the layered configuration. Throws ConfigError on an unusable value. */
export function loadConfig(opts: LoadOptions): LoadedConfig {
  const warnings: string[] = [];
  const userFile = userConfigFile(opts.env);
  const projectFile = projectConfigFile(opts.workspace);
  const config = structuredClone(DEFAULTS) as KrunboxConfig;
  const sources = Object.fromEntries(Object.keys(DEFAULTS).map((k) => [k, "default"])) as Record<ConfigKey, string>;
  const apply = (layer: Layer, source: (k: ConfigKey) => string) => {
    for (const [k, v] of Object.entries(layer) as [ConfigKey, never][]) {
      if (k === "env") config.env = { ...config.env, ...(v as Record<string, string>) };
      else (config as unknown as Record<string, unknown>)[k] = v;
      sources[k] = source(k);
    }
  };

  // A relative local image path is resolved against the directory of the file naming it.
  const withAbsoluteImage = (layer: Layer, base: string): Layer => (layer.image ? { ...layer, image: absoluteImage(layer.image, base) } : layer);

  const user = withAbsoluteImage(readLayerFile(userFile, `user ${userFile}`, warnings), path.dirname(userFile));
  apply(user, () => `user ${userFile}`);

  const trustedByUser = isTrustedByUser(opts.workspace, config.trusted_projects);
  const projectTrusted = opts.piTrustsProject === true || trustedByUser;
  const projectOrigin = `project ${projectFile}`;
  const project = readLayerFile(projectFile, projectOrigin, warnings);
  if (projectTrusted) {
    if (project.trusted_projects) {
      warnings.push(`${projectOrigin}: trusted_projects is only read from your user file (ignored)`);
      delete project.trusted_projects;
    }
    apply(withAbsoluteImage(project, path.dirname(projectFile)), () => projectOrigin);
  } else {
    apply(narrowProject(config, project, projectOrigin, warnings), () => projectOrigin);
  }

  const cwd = opts.cwd ?? process.cwd();
  const { layer: envValues, names } = envLayer(opts.env, warnings);
  apply(withAbsoluteImage(envValues, cwd), (k) => `env ${names[k]}`);

  const flags: Layer = {};
  const flagNames: Partial<Record<ConfigKey, string>> = {};
  const f = opts.flags ?? {};
  if (typeof f["krunbox-image"] === "string" && f["krunbox-image"]) {
    flags.image = checkValue("image", f["krunbox-image"], "flag --krunbox-image") as string;
    flagNames.image = "--krunbox-image";
  }
  if (typeof f["krunbox-network"] === "string" && f["krunbox-network"]) {
    flags.network = checkValue("network", f["krunbox-network"], "flag --krunbox-network") as KrunboxConfig["network"];
    flagNames.network = "--krunbox-network";
  }
  if (f["krunbox-off"] === true) {
    flags.enabled = false;
    flagNames.enabled = "--krunbox-off";
  }
  apply(withAbsoluteImage(flags, cwd), (k) => `flag ${flagNames[k]}`);

  const trustNote = trustedByUser ? "listed in trusted_projects" : (opts.trustNote ?? (opts.piTrustsProject ? "pi: trusted" : "not trusted"));
  const imageTrusted = projectTrusted || !sources.image.startsWith("project ");
  return { config, sources, warnings, userFile, projectFile, projectTrusted, imageTrusted, trustNote };
}

/** Render the effective configuration with the source of each value, for /krunbox config. */
export function describeConfig(loaded: LoadedConfig): string {
  const lines = Object.keys(DEFAULTS).map((k) => {
    const key = k as ConfigKey;
    return `${key} = ${JSON.stringify(loaded.config[key])}  (${loaded.sources[key]})`;
  });
  lines.push(`user file: ${loaded.userFile}`);
  lines.push(`project file: ${loaded.projectFile} (${loaded.projectTrusted ? "trusted" : "untrusted: may only narrow"}; ${loaded.trustNote})`);
  for (const w of loaded.warnings) lines.push(`warning: ${w}`);
  return lines.join("\n");
}
