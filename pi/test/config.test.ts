import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { ConfigError, DEFAULTS, describeConfig, type LoadOptions, loadConfig, userConfigFile } from "../src/config.ts";

let root: string;
let ws: string;
let home: string;

function files(user?: string, project?: string): void {
  if (user !== undefined) writeFileSync(path.join(home, "config", "pi.toml"), user);
  if (project !== undefined) writeFileSync(path.join(ws, ".pi", "krunbox.toml"), project);
}

function load(opts: Partial<LoadOptions> = {}) {
  return loadConfig({ workspace: ws, env: { KRUNBOX_HOME: home }, ...opts, ...(opts.env ? { env: { KRUNBOX_HOME: home, ...opts.env } } : {}) });
}

beforeEach(() => {
  root = mkdtempSync(path.join(tmpdir(), "krunbox-config-"));
  ws = path.join(root, "ws");
  home = path.join(root, "kh");
  mkdirSync(path.join(ws, ".pi"), { recursive: true });
  mkdirSync(path.join(home, "config"), { recursive: true });
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe("config layering", () => {
  test("defaults when there is nothing", () => {
    const l = load();
    assert.deepEqual(l.config, DEFAULTS);
    assert.equal(l.sources.image, "default");
    assert.deepEqual(l.warnings, []);
  });

  test("defaults < user < project < env < flags, with sources", () => {
    files(
      `image = "user/img"\ncpus = 4\nmemory_mib = 4096\nidle_timeout_sec = 60\n[env]\nA = "user"\nB = "user"\n`,
      `image = "project/img"\ncpus = 2\n[env]\nB = "project"\n`,
    );
    const l = load({ env: { KRUNBOX_PI_CPUS: "3", KRUNBOX_PI_IDLE_TIMEOUT_SEC: "5" }, flags: { "krunbox-image": "flag/img" } });
    assert.equal(l.config.image, "flag/img");
    assert.equal(l.sources.image, "flag --krunbox-image");
    assert.equal(l.config.cpus, 3);
    assert.equal(l.sources.cpus, "env KRUNBOX_PI_CPUS");
    assert.equal(l.config.memory_mib, 4096);
    assert.match(l.sources.memory_mib, /^user /);
    assert.equal(l.config.idle_timeout_sec, 5);
    assert.deepEqual(l.config.env, { A: "user", B: "project" }, "env tables merge key by key");
    assert.match(l.sources.env, /^project /);
  });

  test("KRUNBOX_PI_CONFIG names the user file; XDG otherwise", () => {
    const f = path.join(root, "elsewhere.toml");
    writeFileSync(f, `image = "from/elsewhere"\n`);
    assert.equal(load({ env: { KRUNBOX_PI_CONFIG: f } }).config.image, "from/elsewhere");
    assert.equal(userConfigFile({ XDG_CONFIG_HOME: "/x" }), "/x/krunbox/pi.toml");
    assert.equal(userConfigFile({ KRUNBOX_HOME: "/k" }), "/k/config/pi.toml");
  });

  test("env lists, booleans and flags", () => {
    const l = load({ env: { KRUNBOX_PI_PASS_THROUGH_TOOLS: "a, b,,a", KRUNBOX_PI_STOP_ON_EXIT: "yes" }, flags: { "krunbox-off": true, "krunbox-network": "none" } });
    assert.deepEqual(l.config.pass_through_tools, ["a", "b"]);
    assert.equal(l.config.stop_on_exit, true);
    assert.equal(l.config.enabled, false);
    assert.equal(l.sources.enabled, "flag --krunbox-off");
    assert.equal(l.config.network, "none");
  });

  test("bad values are errors naming the file and key, never silently ignored", () => {
    files(`network = "wide"\n`);
    assert.throws(() => load(), (e: Error) => e instanceof ConfigError && /pi\.toml: network: want public, allow=RULE/.test(e.message));
    files(`cpus = "many"\n`);
    assert.throws(() => load(), /cpus: want an integer/);
    files(`image = [\n`);
    assert.throws(() => load(), ConfigError);
    files(``);
    assert.throws(() => load({ env: { KRUNBOX_PI_ENABLED: "maybe" } }), /KRUNBOX_PI_ENABLED: want true or false/);
    assert.throws(() => load({ env: { KRUNBOX_PI_CPUS: "0" } }), /cpus: want at least 1/);
    assert.throws(() => load({ env: { KRUNBOX_PI_CALL_TIMEOUT_SEC: "0" } }), /call_timeout_sec: want at least 1/, "a call deadline cannot be turned off");
    files(`health_timeout_sec = 0\n`);
    assert.throws(() => load(), /health_timeout_sec: want at least 1/);
    files(``);
    assert.throws(() => load({ flags: { "krunbox-network": "wide" } }), /flag --krunbox-network/);
    files(`[[mounts]]\nhost = "relative/path"\n`);
    assert.throws(() => load(), /want an absolute path/);
    files(``, `shell = "bash"\n`);
    assert.throws(() => load(), /shell: want "auto" or an absolute guest path/);
  });

  test("a hostile project file is refused without blocking or reading it whole", () => {
    const project = path.join(ws, ".pi", "krunbox.toml");
    execFileSync("mkfifo", [project]); // readFileSync would block here forever
    assert.throws(() => load(), (e: Error) => e instanceof ConfigError && /not a regular file/.test(e.message));
    rmSync(project);
    writeFileSync(project, "");
    truncateSync(project, 2 ** 31);
    assert.throws(() => load(), /2147483648 bytes, more than the 1048576 read/);
    rmSync(project);
    symlinkSync("/dev/zero", project);
    assert.throws(() => load(), /not a regular file/);
  });

  test("unknown keys are warnings", () => {
    files(`imagee = "typo"\n`);
    const l = load({ env: { KRUNBOX_PI_NOPE: "1" } });
    assert.equal(l.warnings.length, 2);
    assert.match(l.warnings[0] as string, /unknown key imagee/);
    assert.match(l.warnings[1] as string, /KRUNBOX_PI_NOPE/);
  });
});

describe("local images", () => {
  test("a relative path is made absolute against the file naming it, or pi's directory for env and flags", () => {
    files(`image = "oci:images/base:latest"\n`);
    let l = load();
    assert.equal(l.config.image, `oci:${path.join(home, "config", "images", "base")}:latest`);
    assert.equal(l.imageTrusted, true);
    l = load({ env: { KRUNBOX_PI_IMAGE: "docker-archive:../x.tar:repo/img:1" }, cwd: "/home/me/src" });
    assert.equal(l.config.image, "docker-archive:/home/me/x.tar:repo/img:1");
    l = load({ flags: { "krunbox-image": "oci:lay" }, cwd: "/home/me" });
    assert.equal(l.config.image, "oci:/home/me/lay");
    assert.equal(l.imageTrusted, true);
  });

  test("absolute paths and registry references are kept as they are", () => {
    for (const image of ["oci:/srv/img:latest", "docker-archive:/srv/x.tar", "alpine:3.20", "127.0.0.1:5000/img:tag"]) {
      assert.equal(load({ flags: { "krunbox-image": image }, cwd: "/elsewhere" }).config.image, image);
    }
  });

  test("a trusted project may name one, relative to its .pi directory", () => {
    files(undefined, `image = "oci:../img"\n`);
    const l = load({ piTrustsProject: true });
    assert.equal(l.config.image, `oci:${path.join(ws, "img")}`);
    assert.equal(l.imageTrusted, true);
  });
});

describe("untrusted project files may narrow, not widen", () => {
  const user = `cpus = 4\nmemory_mib = 4096\npass_through_tools = ["todo", "web"]\nenv_passthrough = ["GOPATH", "TOKEN"]\n[[mounts]]\nhost = "/srv/cache"\n[[mounts]]\nhost = "/srv/data"\nguest = "/data"\n`;

  test("narrowing is kept", () => {
    files(
      user,
      `cpus = 1\nmemory_mib = 512\nnetwork = "none"\nfallback = "none"\npass_through_tools = ["todo"]\nenv_passthrough = ["GOPATH"]\nimage = "proj/img"\n[[mounts]]\nhost = "/srv/data"\nguest = "/data"\nread_only = true\n`,
    );
    const l = load();
    assert.equal(l.projectTrusted, false);
    assert.equal(l.config.cpus, 1);
    assert.equal(l.config.memory_mib, 512);
    assert.equal(l.config.network, "none");
    assert.deepEqual(l.config.pass_through_tools, ["todo"]);
    assert.deepEqual(l.config.env_passthrough, ["GOPATH"]);
    assert.deepEqual(l.config.mounts, [{ host: "/srv/data", guest: "/data", read_only: true }]);
    assert.equal(l.config.image, "proj/img");
    assert.deepEqual(l.warnings, []);
  });

  test("widening is refused with a warning each", () => {
    files(
      `network = "none"\n${user}`,
      `enabled = false\ncpus = 8\nmemory_mib = 99999\nnetwork = "tsi"\nfallback = "host"\npass_through_tools = ["todo", "shell_exec"]\nenv_passthrough = ["AWS_SECRET_ACCESS_KEY"]\ntrusted_projects = ["/"]\n[[mounts]]\nhost = "/home"\n[[mounts]]\nhost = "/srv/cache"\nread_only = false\n`,
    );
    const l = load();
    assert.equal(l.config.enabled, true);
    assert.equal(l.config.cpus, 4);
    assert.equal(l.config.memory_mib, 4096);
    assert.equal(l.config.network, "none");
    assert.equal(l.config.fallback, "none");
    assert.deepEqual(l.config.pass_through_tools, ["todo"]);
    assert.deepEqual(l.config.env_passthrough, []);
    assert.deepEqual(l.config.mounts, [{ host: "/srv/cache", read_only: false }]);
    assert.deepEqual(l.config.trusted_projects, []);
    const w = l.warnings.join("\n");
    for (const what of ["enabled = false", "cpus = 8", "memory_mib = 99999", 'network = "tsi"', 'fallback = "host"', "shell_exec", "AWS_SECRET_ACCESS_KEY", "mount /home", "trusted_projects"]) {
      assert.ok(w.includes(what), `a warning about ${what} in:\n${w}`);
    }
  });

  test("workspace: a project may ask for an isolated one, not for the live one over yours; KRUNBOX_PI_WORKSPACE", () => {
    files(user, `workspace = "isolated"\n`);
    assert.equal(load().config.workspace, "isolated", "isolated narrows: kept");
    files(`workspace = "isolated"\n${user}`, `workspace = "live"\n`);
    const l = load();
    assert.equal(l.config.workspace, "isolated");
    assert.ok(l.warnings.some((w) => w.includes('workspace = "live"')), l.warnings.join("\n"));
    files(user, "");
    assert.equal(load({ env: { KRUNBOX_PI_WORKSPACE: "isolated" } }).config.workspace, "isolated");
    assert.throws(() => load({ env: { KRUNBOX_PI_WORKSPACE: "copy" } }), (e: Error) => e instanceof ConfigError && /workspace: want one of live, isolated/.test(e.message));
  });

  test("a mount cannot be made writable by the project", () => {
    files(`[[mounts]]\nhost = "/srv/ro"\nread_only = true\n`, `[[mounts]]\nhost = "/srv/ro"\nread_only = false\n`);
    assert.deepEqual(load().config.mounts, [{ host: "/srv/ro", read_only: true }]);
  });

  test("trusted by pi: the project file applies as is", () => {
    files(user, `fallback = "host"\nnetwork = "tsi"\ncpus = 8\n[[mounts]]\nhost = "/home"\n`);
    const l = load({ piTrustsProject: true });
    assert.equal(l.projectTrusted, true);
    assert.equal(l.config.fallback, "host");
    assert.equal(l.config.cpus, 8);
    assert.deepEqual(l.config.mounts, [{ host: "/home", read_only: false }]);
  });

  test("trusted by the user's trusted_projects (pi 0.73 has no trust)", () => {
    files(`trusted_projects = [${JSON.stringify(ws)}]\n`, `fallback = "host"\n`);
    assert.equal(load({ piTrustsProject: undefined }).config.fallback, "host");
    files(`trusted_projects = ["/somewhere/else"]\n`, `fallback = "host"\n`);
    assert.equal(load({ piTrustsProject: undefined }).config.fallback, "none");
  });

  test("the [network] table", () => {
    files(`[network]\nmode = "allow"\nallow = ["registry.example.com", "*.example.com:443"]\n`);
    assert.equal(load().config.network, "allow=registry.example.com,*.example.com:443");
    files(`[network]\nmode = "none"\n`);
    assert.equal(load().config.network, "none");
    for (const bad of [`[network]\nmode = "allow"\n`, `[network]\nmode = "public"\nallow = ["a.test"]\n`, `[network]\nallow = ["a b"]\n`, `[network]\nports = 1\n`]) {
      files(bad);
      assert.throws(() => load(), (e: Error) => e instanceof ConfigError && /network/.test(e.message), bad);
    }
  });

  test("an untrusted project may narrow the network, never widen it", () => {
    const cases: [string, string, string][] = [
      // user, project, result
      ["public", "allow=registry.example.com", "allow=registry.example.com"],
      ["public", "none", "none"],
      ["public", "open", "public"],
      ["public", "tsi", "public"],
      ["allow=a.test", "allow=a.test,b.test", "allow=a.test"],
      ["allow=a.test", "public", "allow=a.test"],
      ["none", "allow=a.test", "none"],
      ["open", "public", "public"],
    ];
    for (const [user, project, want] of cases) {
      files(`network = ${JSON.stringify(user)}\n`, `network = ${JSON.stringify(project)}\n`);
      const l = load({ piTrustsProject: false });
      assert.equal(l.config.network, want, `${user} then ${project}`);
      if (want !== project) assert.ok(l.warnings.some((w) => w.includes("would widen the network")), `${user} then ${project}: ${l.warnings}`);
    }
  });

  test("environment and flags (the user's) may widen again", () => {
    files(`network = "none"\n`);
    assert.equal(load({ env: { KRUNBOX_PI_NETWORK: "tsi" } }).config.network, "tsi");
  });

  test("a local image (oci:, docker-archive:) is refused; a registry image is kept", () => {
    for (const image of ["oci:img:latest", "oci:./img", `oci:${ws}/img:latest`, "oci:/srv/img", "docker-archive:img.tar", "docker-archive:/tmp/x.tar:a:b"]) {
      files(`image = "user/img"\n`, `image = ${JSON.stringify(image)}\n`);
      const l = load();
      assert.equal(l.config.image, "user/img", image);
      assert.match(l.sources.image, /^user /, image);
      assert.equal(l.imageTrusted, true, image);
      assert.ok(l.warnings.some((w) => w.includes(image) && w.includes("local image source")), `a warning about ${image} in ${l.warnings}`);
    }
    files(`image = "user/img"\n`, `image = "ghcr.io/proj/img:1"\n`);
    const l = load();
    assert.equal(l.config.image, "ghcr.io/proj/img:1");
    assert.equal(l.imageTrusted, false, "a project's image is not the user's, so serve refuses it if it is local");
  });

  test("describeConfig shows every key with its source and the warnings", () => {
    files(`image = "u/i"\n`, `fallback = "host"\n`);
    const text = describeConfig(load());
    assert.match(text, /^image = "u\/i" {2}\(user .*pi\.toml\)$/m);
    assert.match(text, /^fallback = "none" {2}\(default\)$/m);
    assert.match(text, /untrusted: may only narrow/);
    assert.match(text, /^warning: .*fallback = "host"/m);
  });
});

describe("secrets", () => {
  const userSecrets = `[[secrets]]\nenv = "OPENAI_API_KEY"\nvalue = "$ENV:OPENAI_API_KEY"\nallow_hosts = ["api.example.com"]\n[[secrets]]\nenv = "GH_TOKEN"\nvalue = "$FILE:~/.config/gh/token"\nallow_hosts = ["git.example.com", "*.git.example.com"]\n`;

  test("the user's [[secrets]] are read, file paths made absolute", () => {
    files(userSecrets);
    const l = load();
    assert.deepEqual(l.config.secrets, [
      { env: "OPENAI_API_KEY", value: "$ENV:OPENAI_API_KEY", allow_hosts: ["api.example.com"] },
      { env: "GH_TOKEN", value: "$FILE:" + path.join(homedir(), ".config/gh/token"), allow_hosts: ["git.example.com", "*.git.example.com"] },
    ]);
    assert.doesNotMatch(describeConfig(l), /sk-/);
  });

  test("an untrusted project cannot add one", () => {
    files(userSecrets, `[[secrets]]\nenv = "STEAL"\nvalue = "$ENV:AWS_SECRET_ACCESS_KEY"\nallow_hosts = ["attacker.example"]\n`);
    const l = load();
    assert.deepEqual(
      l.config.secrets.map((s) => s.env),
      ["OPENAI_API_KEY", "GH_TOKEN"],
    );
    assert.ok(l.warnings.some((w) => /secrets STEAL would send host secrets to hosts the project names: refused because the project is not trusted/.test(w)), l.warnings.join("\n"));
  });

  test("a trusted project may", () => {
    files(`trusted_projects = [${JSON.stringify(ws)}]\n`, `[[secrets]]\nenv = "NPM_TOKEN"\nvalue = "$ENV:NPM_TOKEN"\nallow_hosts = ["registry.example.com"]\n`);
    assert.deepEqual(load().config.secrets.map((s) => s.env), ["NPM_TOKEN"]);
  });

  test("not from the environment", () => {
    const l = load({ env: { KRUNBOX_PI_SECRETS: "X" } });
    assert.deepEqual(l.config.secrets, []);
    assert.ok(l.warnings.some((w) => /KRUNBOX_PI_SECRETS: not a setting/.test(w)));
  });

  for (const [name, toml, want] of [
    ["a literal value", `value = "sk-123"\nallow_hosts = ["a.example"]`, /want "\$ENV:HOST_VAR" or "\$FILE:\/path"/],
    ["no hosts", `value = "$ENV:X"\nallow_hosts = []`, /allow_hosts: want a non-empty list/],
    ["a relative file", `value = "$FILE:token"\nallow_hosts = ["a.example"]`, /want an absolute path/],
    ["an unknown key", `value = "$ENV:X"\nallow_hosts = ["a.example"]\nhosts = ["b.example"]`, /unknown key/],
  ] as const) {
    test(`${name} is a clear error`, () => {
      files(`[[secrets]]\nenv = "K"\n${toml}\n`);
      assert.throws(() => load(), (err: Error) => err instanceof ConfigError && want.test(err.message));
    });
  }
});
