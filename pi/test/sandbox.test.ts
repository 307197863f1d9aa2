// The SandboxController against scripted servers, for what a real one does not do on cue.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { DEFAULTS, type KrunboxConfig } from "../src/config.ts";
import { ServeClient } from "../src/rpc.ts";
import { agentPingMs, SandboxController, sandboxConfig } from "../src/sandbox.ts";

/** A server that answers initialize and sandbox.ensure, then nothing (its exec.start hangs). */
function hangsAfterEnsure(): Promise<ServeClient> {
  const reply = (id: number, result: object) => `echo '${JSON.stringify({ jsonrpc: "2.0", id, result })}'`;
  const init = { protocolVersion: 1, server: { name: "x", version: "1" }, limits: {} };
  const script = `read l; ${reply(1, init)}; read l; ${reply(2, { name: "s", state: "ready" })}; exec sleep 60`;
  return ServeClient.connect({ bin: "/bin/sh", args: ["-c", script] }, { name: "test", version: "0" });
}

describe("SandboxController", () => {
  test("a server that stops answering after the start fails the start, not the image's shell", async () => {
    const config: KrunboxConfig = { ...structuredClone(DEFAULTS) as KrunboxConfig, call_timeout_sec: 1 };
    const ctrl = new SandboxController({ name: "s", workspace: "/ws", config, imageTrusted: true, connect: hangsAfterEnsure });
    try {
      const t0 = Date.now();
      await ctrl.start();
      assert.ok(Date.now() - t0 < 5000, "within the call deadline");
      assert.equal(ctrl.state.kind, "failed");
      assert.match((ctrl.state as { reason: string }).reason, /did not answer exec\.start within 1 s/);
    } finally {
      await ctrl.dispose();
    }
  });
});

describe("agentPingMs", () => {
  test("gives the server half the health deadline to ping the agent, at least 100 ms", () => {
    assert.equal(agentPingMs(5000), 2500);
    assert.equal(agentPingMs(1000), 500);
    assert.equal(agentPingMs(150), 100);
  });
});

describe("sandboxConfig", () => {
  test("secrets go as name, source and hosts, and only when there are some", () => {
    const config = { ...structuredClone(DEFAULTS), secrets: [{ env: "K", value: "$ENV:HOST_K", allow_hosts: ["a.example"] }, { env: "F", value: "$FILE:/run/tok", allow_hosts: ["*.b.example"] }] };
    assert.deepEqual(sandboxConfig(config, "/ws", true).secrets, [
      { name: "K", source: "env:HOST_K", hosts: ["a.example"] },
      { name: "F", source: "file:/run/tok", hosts: ["*.b.example"] },
    ]);
    assert.equal("secrets" in sandboxConfig(structuredClone(DEFAULTS), "/ws", true), false);
  });
  test("tells serve whether the image is the user's, which a local image needs", () => {
    const config = { ...(structuredClone(DEFAULTS) as KrunboxConfig), image: "oci:/srv/img:latest" };
    assert.equal(sandboxConfig(config, "/ws", true).imageTrusted, true);
    assert.equal(sandboxConfig(config, "/ws", false).imageTrusted, false);
    assert.equal(sandboxConfig(config, "/ws", true).image, "oci:/srv/img:latest");
  });
});
