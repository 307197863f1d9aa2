package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// floodBytes is what the guest writes to its console: three times what
// the console log keeps (a nested real VM's console takes seconds for it).
const floodBytes = 3 * 2 * logfile.DefaultMax

// testLogsBounded has a guest command write far more than the console
// log keeps to the console (/proc/1/fd/1, init's stdout, appended to: a
// console that were a file would keep it all): the sandbox's
// directory grows by the bound at most, "logs" still shows the last
// lines, and "logs -f" follows the log across its rotations to them.
func testLogsBounded(t *testing.T, e *env) {
	dir := e.started("flooded")
	cmd := e.command("logs", "-f", "flooded")
	var followed syncbuf.Buffer
	cmd.Stdout = &followed
	done := startCmd(t, cmd)
	script := "yes 'the guest floods its console with this line' | head -c " + strconv.Itoa(floodBytes) + " >> /proc/1/fd/1; echo the-last-line >> /proc/1/fd/1"
	r, _ := e.within(5*time.Minute, "exec", "flooded", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	// The console is written asynchronously: wait for the last line.
	poll.Until(t, "the last line in the console log", time.Minute, func() bool {
		return strings.Contains(e.krunbox("logs", "flooded").stdout, "the-last-line")
	})
	if size := dirFilesSize(t, dir); size > 2*logfile.DefaultMax+1<<20 {
		t.Errorf("the sandbox's directory holds %d MiB of files after the guest wrote %d MiB to its console, want at most %d MiB",
			size>>20, floodBytes>>20, (2*logfile.DefaultMax+1<<20)>>20)
	}
	out := e.ok("logs", "flooded")
	if !strings.HasSuffix(strings.ReplaceAll(out, "\r\n", "\n"), "the-last-line\n") {
		t.Errorf("logs does not end with the guest's last line: ...%q", out[max(0, len(out)-200):])
	}
	if len(out) > 2*logfile.DefaultMax {
		t.Errorf("logs printed %d bytes, over the %d the console log keeps", len(out), 2*logfile.DefaultMax)
	}
	poll.Until(t, "logs -f to print the last line", time.Minute, func() bool { return strings.Contains(followed.String(), "the-last-line") })
	e.ok("stop", "flooded")
	if code := exitOf(t, done, 30*time.Second, "logs -f after the VM stopped"); code != 0 {
		t.Errorf("logs -f: exit %d", code)
	}
}

// dirFilesSize is the size of the regular files directly in dir: the
// sandbox's records and logs, not its root.
func dirFilesSize(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, e := range entries {
		// A block root's disk is bounded by its size (BlockRoot), not
		// by the logs' bound.
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && e.Name() != "disk.img" {
			size += fi.Size()
		}
	}
	return size
}
