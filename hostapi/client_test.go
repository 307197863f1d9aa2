package hostapi

import (
	"context"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
)

// newTestClient starts an agent with cfg and returns a client of it.
func newTestClient(t testing.TB, cfg *protocol.Config, env ...string) (*Client, *agenttest.Agent) {
	t.Helper()
	a := agenttest.Start(t, cfg, env...)
	c := NewUnixClient(a.Socket)
	t.Cleanup(func() { c.Close() })
	return c, a
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSmoke(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	res, err := c.Run(ctx, Command("sh", "-c", "echo hi; echo err >&2; exit 3"))
	t.Logf("res=%+v err=%v", res, err)
	if rtt, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("ping %v", rtt)
	}
	b, err := c.ReadFile(ctx, "/etc/hostname")
	t.Logf("%q %v", b, err)
}
