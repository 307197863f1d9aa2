package hostapi

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/testutil/poll"
)

// Config.Limits reach the runner: in the VM spec it reads, and in what it
// does (a console flooded past a small LogSize keeps to it).
func TestLimitsReachTheRunner(t *testing.T) {
	h, ref := testHost(t)
	lim := Limits{TCPConnections: 3, UDPFlows: 4, DNSConnections: 2, DNSQueries: 5, ConnectionBuffer: 1 << 20, NetworkBuffer: 8 << 20, LogSize: logfile.MinMax}
	sb := started(t, h, Config{Image: ref, Limits: lim})

	spec, err := vmm.ReadSpec(sb.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if spec.NetLimits != lim.netstack() || spec.LogMax != lim.LogSize {
		t.Errorf("VM spec limits: net %+v, log %d; want %+v, %d", spec.NetLimits, spec.LogMax, lim.netstack(), lim.LogSize)
	}
	if got := sb.Config().Limits; got != lim {
		t.Errorf("the sandbox's config keeps limits %+v, want %+v", got, lim)
	}

	c := sb.Client()
	defer c.Close()
	script := "yes 'a line of the flood' | head -c 1048576 >> /proc/1/fd/1; echo the-last-line >> /proc/1/fd/1"
	if _, err := c.Output(t.Context(), "sh", "-c", script); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the last line in the console log", 30*time.Second, func() bool {
		b, _ := os.ReadFile(sb.ConsolePath())
		return strings.Contains(string(b), "the-last-line")
	})
	for _, p := range []string{sb.ConsolePath(), logfile.Prev(sb.ConsolePath())} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > lim.LogSize {
			t.Errorf("%s: %v, want a file of at most %d bytes", p, err, lim.LogSize)
		}
	}
}

func TestLimitsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  Limits
		want string
	}{
		{"negative connections", Limits{TCPConnections: -1}, "TCPConns"},
		{"negative buffer", Limits{NetworkBuffer: -5}, "Buffer"},
		{"log under the minimum", Limits{LogSize: 1024}, "log size 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{Image: "alpine", Limits: tc.lim}.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if err := (Config{Image: "alpine", Limits: DefaultLimits()}).Validate(); err != nil {
		t.Errorf("the default limits: %v", err)
	}
}
