// The ServeClient's own behaviour: failures of the server process and of the transport.
// (What a server must do is in conformance.test.ts.)

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { ClientErrorCode, ErrorCode, errorCodeName, RpcError } from "../src/protocol.ts";
import { ServeClient } from "../src/rpc.ts";
import { eventually, rpcRejection, withServer } from "./serve-driver.ts";

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
      const p = c.request("sandbox.ensure", env.ensureParams(name), { signal: ac.signal });
      ac.abort();
      assert.equal((await rpcRejection(p)).code, ClientErrorCode.Aborted);
    }));

  describe("deadlines", () => {
    const init = JSON.stringify({ jsonrpc: "2.0", id: 1, result: { protocolVersion: 1, server: { name: "x", version: "1" }, limits: {} } });
    const answer = (id: number, result: object) => `echo '${JSON.stringify({ jsonrpc: "2.0", id, result })}'`;

    test("a request without an answer in time rejects with Timeout; a late answer goes to onLate only", async () => {
      // Request 2 is answered only after request 3 arrived.
      const c = await ServeClient.connect(sh(`read l; echo '${init}'; read l; read l; ${answer(2, { late: true })}; ${answer(3, {})}; exec sleep 30`), client);
      try {
        const late: unknown[] = [];
        const t0 = Date.now();
        const err = await rpcRejection(c.request("x.slow", {}, { timeoutMs: 200, onLate: (r) => late.push(r) }));
        assert.equal(err.code, ClientErrorCode.Timeout);
        assert.equal(err.message, "krunbox serve did not answer x.slow within 200 ms");
        assert.ok(Date.now() - t0 >= 190, "not before the deadline");
        assert.deepEqual(await c.request("x.trigger", {}), {});
        assert.deepEqual(late, [{ late: true }]);
      } finally {
        await c.close(100);
      }
    });

    test("a command started after exec.start timed out is killed", async () => {
      const dir = mkdtempSync(path.join(tmpdir(), "krunbox-rpc-"));
      const seen = path.join(dir, "signal");
      const c = await ServeClient.connect(
        sh(`read l; echo '${init}'; read l; read l; ${answer(2, { execId: "x1", pid: 7 })}; ${answer(3, {})}; read l; echo "$l" > ${seen}.tmp; mv ${seen}.tmp ${seen}; ${answer(4, { delivered: true })}; exec sleep 30`),
        client,
      );
      try {
        const err = await rpcRejection(c.exec({ sandbox: "s", argv: ["true"] }, { startTimeoutMs: 200 }));
        assert.equal(err.code, ClientErrorCode.Timeout);
        assert.match(err.message, /did not answer exec\.start within 200 ms/);
        await c.request("x.trigger", {});
        await eventually(() => existsSync(seen), "exec.signal after the late start");
        assert.deepEqual(JSON.parse(readFileSync(seen, "utf8")).params, { execId: "x1", signal: "SIGKILL" });
      } finally {
        await c.close(100);
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test("a killed command whose end is never reported rejects after the start deadline", async () => {
      // exec.start and exec.signal are answered; exec.exit never comes.
      const c = await ServeClient.connect(sh(`read l; echo '${init}'; read l; ${answer(2, { execId: "x1", pid: 7 })}; read l; ${answer(3, { delivered: true })}; exec sleep 30`), client);
      try {
        const ac = new AbortController();
        const running = c.exec({ sandbox: "s", argv: ["sleep", "9"] }, { signal: ac.signal, startTimeoutMs: 300, onStart: () => ac.abort() });
        const t0 = Date.now();
        const err = await rpcRejection(running);
        assert.equal(err.code, ClientErrorCode.Timeout);
        assert.match(err.message, /did not report the end of the command within 300 ms after it was killed/);
        assert.ok(Date.now() - t0 < 5000);
      } finally {
        await c.close(100);
      }
    });
  });

  test("error codes have their documented names", () => {
    assert.equal(errorCodeName(ErrorCode.NotReady), "not-ready");
    assert.equal(errorCodeName(ErrorCode.ExecFailed), "exec-failed");
    assert.equal(errorCodeName(ErrorCode.InvalidParams), "invalid-params");
    assert.equal(new RpcError(ErrorCode.StartFailed, "x", { hint: "do y" }).hint, "do y");
  });
});
