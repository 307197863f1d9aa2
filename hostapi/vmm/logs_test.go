//go:build linux

package vmm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/krun"
)

// floodScript writes about 2 MiB of lines to the console through init's
// stdout (/proc/1/fd/1, as a guest command can), then a last line.
const floodScript = `yes 'the guest floods its console with this line' | head -c 2000000 >> /proc/1/fd/1; echo the-last-line`

// TestLogsBounded has the guest write 30 times the bound to a log it can
// make grow: each of the log's files stays under the bound, the log ends
// with the guest's last line, and the VM is not held back.
func TestLogsBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		// log is the log the guest writes into.
		log func(spec *Spec, dir string) string
	}{
		{"console", func(spec *Spec, _ string) string { return spec.ConsoleLog }},
		// Without a console file, the console goes to the runner's
		// stderr: the double's guest inherits it, libkrun logs it (and
		// gives the program's stdout its own port, to the runner's
		// stdout).
		{"runner log", func(spec *Spec, dir string) string {
			spec.ConsoleLog = ""
			spec.LogLevel = krun.LogError
			return filepath.Join(dir, LogFile)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec, dir := shellSpec(t, floodScript)
			spec.LogMax = logfile.MinMax
			log := tt.log(spec, dir)
			if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
				t.Fatalf("exit status %v", es)
			}
			for _, f := range []string{log, logfile.Prev(log)} {
				fi, err := os.Stat(f)
				if err != nil {
					t.Fatalf("%s: %v (the log was not rotated)", f, err)
				}
				if fi.Size() > logfile.MinMax {
					t.Errorf("%s holds %d bytes, over the bound of %d", f, fi.Size(), logfile.MinMax)
				}
			}
			// The whole log: on libkrun, the console and the program's
			// stdout reach the runner's log by two ports, out of order.
			tail, err := logfile.TailLines(log, 2*logfile.MinMax)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(string(tail), "\r\n", "\n"); !strings.Contains(got, "the-last-line\n") {
				t.Errorf("the log lacks the guest's last line; its end:\n%s", got[max(0, len(got)-2048):])
			}
		})
	}
}

// TestLogsOfTheLastBoot: a boot starts new console and runner logs, so
// that a reader following the old ones sees them replaced, and leaves
// no previous file of the boot before.
func TestLogsOfTheLastBoot(t *testing.T) {
	spec, dir := shellSpec(t, floodScript)
	spec.LogMax = logfile.MinMax
	wait(t, startVM(t, dir, spec))
	// Held open, as a follower holds it: its inode cannot be reused.
	f, err := os.Open(spec.ConsoleLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	spec.Exec.Args = []string{"-c", "echo second boot"}
	wait(t, startVM(t, dir, spec))
	if got := console(t, spec); got != "second boot\n" {
		t.Errorf("console of the second boot %q", got)
	}
	if now, err := os.Stat(spec.ConsoleLog); err != nil || os.SameFile(old, now) {
		t.Errorf("the second boot's console log is the first's file (%v)", err)
	}
	if _, err := os.Stat(logfile.Prev(spec.ConsoleLog)); !os.IsNotExist(err) {
		t.Errorf("the first boot's previous console file is left: %v", err)
	}
}
