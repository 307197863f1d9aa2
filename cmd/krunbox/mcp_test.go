package main

import (
	"strings"
	"testing"
)

// krunbox mcp refuses what would serve the sandbox beyond this machine's
// user, or a workspace it cannot have, before serving anything.
func TestMCPRefusals(t *testing.T) {
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	ws := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--workspace", ws, "--http", "0.0.0.0:0"}, "want a loopback address"},
		{[]string{"mcp", "--workspace", ws, "--http", "192.0.2.1:80"}, "want a loopback address"},
		{[]string{"mcp", "--workspace", ws, "--http", "no-port"}, "want HOST:PORT"},
		{[]string{"mcp", "--workspace", ws, "--http", "127.0.0.1:0", "--socket", ws + "/s"}, "not both"},
		{[]string{"mcp", "--workspace", ws + "/missing"}, "not a directory"},
		{[]string{"mcp", "--workspace", "/"}, "refusing to mount /"},
	}
	for _, tt := range tests {
		code, _, errOut := runCLI(t, tt.args...)
		if code != ExitKrunbox || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tt.args, code, errOut, ExitKrunbox, tt.want)
		}
	}
}
