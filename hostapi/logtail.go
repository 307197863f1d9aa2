package hostapi

import (
	"io"
	"os"
	"strings"

	"github.com/krunbox/krunbox/hostapi/vmm"
)

// readTail returns the last limit bytes of the file at path, starting at a
// line when the file is longer; it reads no more than that, however large
// the guest made the file.
func readTail(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-limit, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, limit))
	if err != nil {
		return nil, err
	}
	if off > 0 {
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b, nil
}

// tail returns the last lines of a file, at most limit bytes, on one line.
func tail(path string, limit int64) string {
	b, err := readTail(path, limit)
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
func (s *Sandbox) Tails(limit int64) (console, runnerLog string) {
	c, _ := readTail(s.ConsolePath(), limit)
	l, _ := readTail(s.RunnerLogPath(), limit)
	return string(c), string(l)
}
