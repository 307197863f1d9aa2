package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, _ := runCLI(t, args...)
		if code != 0 || !strings.HasPrefix(out, "krunbox ") {
			t.Errorf("%v: code %d, out %q; want 0 and \"krunbox <version>\"", args, code, out)
		}
	}
}

func TestUsageErrorsExit125WithHint(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--no-such-flag"}, "unknown flag"},
		{"unknown command", []string{"no-such-command"}, `unknown command "no-such-command"`},
		{"misspelt command", []string{"exce"}, `unknown command "exce"`},
		{"extra args", []string{"version", "x"}, "takes no arguments"},
		{"cp between host paths", []string{"cp", "a", "b"}, "give exactly one of SRC and DST as NAME:PATH"},
		{"bad log level", []string{"--log-level", "loud", "version"}, "log level"},
		{"secret without hosts", []string{"create", "--secret", "API_KEY=env:OPENAI_KEY", "alpine"}, "want NAME=env:HOST_VAR@host1,host2"},
		{"secret with a bad host", []string{"run", "--secret", "API_KEY=env:OPENAI_KEY@https://api.example.com", "alpine"}, "no scheme, port or path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tt.args...)
			if code != ExitKrunbox {
				t.Errorf("exit code %d, want %d", code, ExitKrunbox)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if !strings.HasPrefix(lines[0], "krunbox: ") || !strings.Contains(lines[0], tt.want) {
				t.Errorf("first stderr line %q, want \"krunbox: ...%s...\"", lines[0], tt.want)
			}
			if len(lines) != 2 || !strings.HasPrefix(lines[1], "hint: ") {
				t.Errorf("stderr %q: want a hint line", errOut)
			}
			if strings.Contains(errOut, "; ;") || strings.Contains(errOut, "\t") {
				t.Errorf("stderr %q: cobra's multi-line text leaked into the line", errOut)
			}
			if tt.args[0] == "exce" && !strings.Contains(lines[len(lines)-1], "did you mean exec?") {
				t.Errorf("hint %q: want cobra's suggestion, exec", lines[len(lines)-1])
			}
		})
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	root := newRootCmd(&streams{})
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		code, out, errOut := runCLI(t, c.Name(), "--help")
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("%s --help: code %d, stdout %q, stderr %q", c.Name(), code, out, errOut)
		}
		if c.Short == "" {
			t.Errorf("%s has no short description", c.Name())
		}
	}
}

func TestReport(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode int
		wantErr  string
	}{
		{"nil", nil, 0, ""},
		{"exit status passes through", fmt.Errorf("run: %w", exitStatus(3)), 3, ""},
		{"plain error", errors.New("boom"), ExitKrunbox, "krunbox: boom\n"},
		{"multi-line error is one line", errors.New("a\nb"), ExitKrunbox, "krunbox: a; b\n"},
		{"hint", withHint(errors.New("no kvm"), "load the kvm module"), ExitKrunbox, "krunbox: no kvm\nhint: load the kvm module\n"},
		{"wrapped hint", fmt.Errorf("start: %w", withHint(errors.New("no kvm"), "x")), ExitKrunbox, "krunbox: start: no kvm\nhint: x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if code := report(&buf, tt.err); code != tt.wantCode {
				t.Errorf("code %d, want %d", code, tt.wantCode)
			}
			if buf.String() != tt.wantErr {
				t.Errorf("stderr %q, want %q", buf.String(), tt.wantErr)
			}
		})
	}
}
