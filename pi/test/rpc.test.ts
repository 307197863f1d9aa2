// The ServeClient's own behaviour: failures of the server process and of the transport.
// (What a server must do is in conformance.test.ts.)

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ClientErrorCode, ErrorCode, errorCodeName, RpcError } from "../src/protocol.ts";
import { ServeClient } from "../src/rpc.ts";
import { rpcRejection, withServer } from "./serve-driver.ts";

const client = { name: "test", version: "0" };

/** A fake server: a shell script answering requests on stdin. */
function sh(script: string) {
  return { bin: "/bin/sh", args: ["-c", script] };
}

describe("ServeClient", () => {
  test("a missing binary is a clear error", async () => {
    const err = await rpcRejection(ServeClient.connect({ bin: "/nonexistent/krunbox" }, client));
    assert.equal(err.code, ClientErrorCode.ServerExited);
    assert.match(err.message, /cannot run \/nonexistent\/krunbox/);
  });

  test("a server that exits at once reports its exit code and last stderr line", async () => {
    const err = await rpcRejection(ServeClient.connect(sh(`echo 'starting' >&2; echo 'krunbox: unknown command "serve" for "krunbox"' >&2; echo "hint: see 'krunbox --help'" >&2; exit 125`), client));
    assert.equal(err.code, ClientErrorCode.ServerExited);
    assert.equal(err.message, `krunbox serve exited with code 125: krunbox: unknown command "serve" for "krunbox"; hint: see 'krunbox --help'`);
  });

  test("a server speaking another protocol version is refused", async () => {
    const reply = JSON.stringify({ jsonrpc: "2.0", id: 1, result: { protocolVersion: 2, server: { name: "x", version: "9" }, limits: {} } });
    const err = await rpcRejection(ServeClient.connect(sh(`read l; echo '${reply}'; exec sleep 30`), client));
    assert.match(err.message, /protocol version 2, this extension speaks 1/);
  });

  test("a server that never answers initialize times out and is killed", async () => {
    const t0 = Date.now();
    const err = await rpcRejection(ServeClient.connect(sh("exec sleep 30"), client, 300));
    assert.match(err.message, /did not answer initialize within 300 ms/);
    assert.ok(Date.now() - t0 < 10_000, "close() must not wait for the sleeping server");
  });

  test("lines that are not JSON are skipped and noted", async () => {
    const reply = JSON.stringify({ jsonrpc: "2.0", id: 1, result: { protocolVersion: 1, server: { name: "x", version: "1" }, limits: {} } });
    const c = await ServeClient.connect(sh(`read l; echo 'garbage here'; echo '${reply}'; exec sleep 30`), client);
    try {
      assert.equal(c.info?.server.name, "x");
      assert.match(c.stderr, /not JSON: garbage here/);
    } finally {
      await c.close(100);
    }
  });

  test("a server that dies fails pending requests and running execs, and says so once", () =>
    withServer({}, async (c, env) => {
      const name = env.name("crash");
      await c.request("sandbox.ensure", env.ensureParams(name));
      const running = c.exec({ sandbox: name, argv: ["/bin/sh", "-c", "sleep 30"] });
      running.catch(() => {});
      const closes: string[] = [];
      c.onClose((e) => closes.push(e.message));
      // Pending: the server is killed before it can answer.
      const pending = c.request("sandbox.ensure", env.ensureParams(env.name("never")));
      process.kill(c.pid as number, "SIGKILL");
      const err = await rpcRejection(pending);
      assert.equal(err.code, ClientErrorCode.ServerExited);
      assert.match(err.message, /was killed by SIGKILL/);
      assert.equal((await rpcRejection(running)).code, ClientErrorCode.ServerExited);
      assert.equal((await rpcRejection(c.request("sandbox.status", { name }))).code, ClientErrorCode.ServerExited);
      assert.equal(c.closed, true);
      assert.equal(closes.length, 1);
    }));

  test("an aborted request rejects at once", () =>
    withServer({}, async (c, env) => {
      const ac = new AbortController();
      const name = env.name("abort");
      const p = c.request("sandbox.ensure", env.ensureParams(name), ac.signal);
      ac.abort();
      assert.equal((await rpcRejection(p)).code, ClientErrorCode.Aborted);
    }));

  test("error codes have their documented names", () => {
    assert.equal(errorCodeName(ErrorCode.NotReady), "not-ready");
    assert.equal(errorCodeName(ErrorCode.ExecFailed), "exec-failed");
    assert.equal(errorCodeName(ErrorCode.InvalidParams), "invalid-params");
    assert.equal(new RpcError(ErrorCode.StartFailed, "x", { hint: "do y" }).hint, "do y");
  });
});
