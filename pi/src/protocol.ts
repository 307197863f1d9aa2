// Types and constants of the `krunbox serve --stdio` protocol, version 1.
// docs/serve-protocol.md is the specification; this file mirrors it.

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;

/** Stable error codes (docs/serve-protocol.md §3). */
export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  NotInitialized: -32002,
  UnsupportedVersion: 1001,
  NotReady: 1002,
  StartFailed: 1003,
  ConfigMismatch: 1004,
  NotFound: 1005,
  NotDir: 1006,
  IsDir: 1007,
  Permission: 1008,
  ExecFailed: 1009,
  TooLarge: 1010,
  IO: 1011,
  InvalidConfig: 1012,
} as const;

/** Codes the client itself uses for failures of the transport, never sent by a server. */
export const ClientErrorCode = {
  /** The server process exited or its stdout closed. */
  ServerExited: -1,
  /** The caller aborted the request. */
  Aborted: -2,
  /** The server did not answer within the request's deadline. */
  Timeout: -3,
} as const;

const codeNames: Record<number, string> = Object.fromEntries(
  Object.entries({ ...ErrorCode, ...ClientErrorCode }).map(([k, v]) => [
    v,
    k.replace(/([a-z])([A-Z])/g, "$1-$2").toLowerCase(),
  ]),
);

/** The documented name of an error code, e.g. "not-ready" for 1002. */
export function errorCodeName(code: number): string {
  return codeNames[code] ?? `error-${code}`;
}

/** Data of a JSON-RPC error object. */
export interface ErrorData {
  hint?: string;
  status?: SandboxStatus;
  consoleTail?: string;
  keys?: string[];
  reason?: string;
  supported?: number[];
  [key: string]: unknown;
}

/** An error answered by the server, or raised by the client for a dead transport. */
export class RpcError extends Error {
  readonly code: number;
  readonly data: ErrorData | undefined;

  constructor(code: number, message: string, data?: ErrorData) {
    super(message);
    this.name = "RpcError";
    this.code = code;
    this.data = data;
  }

  /** The documented name of the code. */
  get codeName(): string {
    return errorCodeName(this.code);
  }

  /** The server's hint, if any. */
  get hint(): string | undefined {
    return typeof this.data?.hint === "string" ? this.data.hint : undefined;
  }
}

export interface InitializeParams {
  protocolVersion: number;
  client: { name: string; version: string };
}

export interface ServerLimits {
  maxLineBytes: number;
  maxReadBytes: number;
  maxWriteBytes: number;
}

export interface InitializeResult {
  protocolVersion: number;
  server: { name: string; version: string };
  limits: ServerLimits;
}

export interface MountSpec {
  host: string;
  guest?: string;
  readOnly?: boolean;
}

/** "public", "allow=RULE,...", "open", "tsi" or "none". */
export type NetworkMode = string;
export type PullPolicy = "missing" | "always" | "never";

/** `config` of sandbox.ensure and sandbox.restart. */
export interface SandboxConfig {
  image: string;
  /**
   * The image comes from the user (their configuration, environment or flags, or a project
   * they trust), not from an untrusted project's file: only then does serve take a local
   * image source (oci:, docker-archive:).
   */
  imageTrusted?: boolean;
  pull?: PullPolicy;
  cpus?: number;
  memoryMiB?: number;
  network?: NetworkMode;
  mounts?: MountSpec[];
  env?: Record<string, string>;
  idleTimeoutSec?: number;
  labels?: Record<string, string>;
  /** The sandbox gets its own checkout of the workspace's HEAD (krunbox create --isolate). */
  isolate?: boolean;
  /** Secrets (see krunbox create --secret); only sent when there are any. */
  secrets?: SecretSpec[];
}

/** A secret: the guest variable name, the host source of its value, the hosts it goes to. */
export interface SecretSpec {
  name: string;
  /** env:HOST_VAR or file:/absolute/path, read by krunbox at each start. */
  source: string;
  hosts: string[];
}

export interface EnsureParams {
  name: string;
  workspace: string;
  config: SandboxConfig;
  startTimeoutMs?: number;
}

export interface RestartParams extends EnsureParams {
  recreate?: boolean;
}

export type SandboxState = "absent" | "stopped" | "starting" | "ready" | "unresponsive" | "dead" | "failed";

export interface SandboxStatus {
  name: string;
  state: SandboxState;
  image?: string;
  imageDigest?: string;
  workspace?: string;
  hostname?: string;
  bootMs?: number;
  created?: boolean;
  configChanged?: string[];
  reason?: string;
  hint?: string;
}

export interface LogsResult {
  text: string;
  truncated: boolean;
}

export interface ExecStartParams {
  sandbox: string;
  execId: string;
  argv: string[];
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  /** base64 */
  stdin?: string;
}

export interface ExecStartResult {
  execId: string;
  pid?: number;
}

export type OutputStream = "stdout" | "stderr";

export interface ExecOutputParams {
  execId: string;
  stream: OutputStream;
  /** base64 */
  data: string;
}

export interface ExecExitParams {
  execId: string;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  error?: { code: number; message: string };
}

/** Signal names exec.signal accepts. */
export const SIGNALS = [
  "SIGHUP",
  "SIGINT",
  "SIGQUIT",
  "SIGKILL",
  "SIGUSR1",
  "SIGUSR2",
  "SIGTERM",
  "SIGCONT",
  "SIGSTOP",
] as const;
export type SignalName = (typeof SIGNALS)[number];

export type FileType = "file" | "dir" | "symlink" | "other";

export interface ReadFileResult {
  /** base64 */
  data: string;
  size: number;
  eof: boolean;
}

export interface StatResult {
  type: FileType;
  size: number;
  mode: number;
  mtimeMs: number;
}

export interface DirEntry {
  name: string;
  type: FileType;
}
