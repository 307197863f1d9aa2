package hostapi

import (
	"strings"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/logfile"
)

// tail returns the last lines of a log, at most limit bytes, on one line.
func tail(path string, limit int64) string {
	b, err := logfile.TailLines(path, limit)
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | ")), " ")
}

// RunnerLogPath is the VM runner's log: its own messages and libkrun's
// warnings and errors, for the sandbox's last boot.
func (s *Sandbox) RunnerLogPath() string { return s.path(vmm.LogFile) }

// Tails returns the last lines of the sandbox's console and of its runner's
// log (the runner's own messages and libkrun's warnings and errors), each
// at most limit bytes, as they are, for showing a VM that did not start.
// Each log spans its rotation (see vmm.Spec.LogMax).
func (s *Sandbox) Tails(limit int64) (console, runnerLog string) {
	c, _ := logfile.TailLines(s.ConsolePath(), limit)
	l, _ := logfile.TailLines(s.RunnerLogPath(), limit)
	return string(c), string(l)
}
