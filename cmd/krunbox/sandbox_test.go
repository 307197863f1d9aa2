package main

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/hostapi"
)

func TestSplitImageCommand(t *testing.T) {
	for _, tt := range []struct {
		args      []string
		wantImage string
		wantCmd   []string
	}{
		{[]string{"alpine", "--", "uname", "-a"}, "alpine", []string{"uname", "-a"}},
		{[]string{"alpine", "uname", "-a"}, "alpine", []string{"uname", "-a"}},
		{[]string{"alpine"}, "alpine", nil},
		{[]string{"--", "ls", "-l"}, "", []string{"ls", "-l"}},
		{nil, "", nil},
		{[]string{"alpine", "--", "--", "x"}, "alpine", []string{"--", "x"}},
	} {
		cmd := newRunCmd(&streams{})
		if err := cmd.ParseFlags(append([]string{"--rm"}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		image, argv := splitImageCommand(cmd, cmd.Flags().Args())
		if image != tt.wantImage || !slices.Equal(argv, tt.wantCmd) {
			t.Errorf("%q: image %q, command %q; want %q, %q", tt.args, image, argv, tt.wantImage, tt.wantCmd)
		}
	}
}

func TestImageCommand(t *testing.T) {
	ic := hostapi.ImageConfig{Entrypoint: []string{"/entry", "-x"}, Cmd: []string{"default"}}
	if got := imageCommand(ic, nil); !slices.Equal(got, []string{"/entry", "-x", "default"}) {
		t.Errorf("no command: %q", got)
	}
	if got := imageCommand(ic, []string{"mine"}); !slices.Equal(got, []string{"/entry", "-x", "mine"}) {
		t.Errorf("a command replaces the image's, after its entrypoint: %q", got)
	}
	if got := imageCommand(hostapi.ImageConfig{}, nil); len(got) != 0 {
		t.Errorf("nothing to run: %q", got)
	}
}

func TestParseEnv(t *testing.T) {
	t.Setenv("KRUNBOX_TEST_HOST_VAR", "from host")
	got, err := parseEnv([]string{"A=1", "B=", "KRUNBOX_TEST_HOST_VAR", "KRUNBOX_TEST_UNSET_VAR", "C=x=y"})
	want := []string{"A=1", "B=", "KRUNBOX_TEST_HOST_VAR=from host", "C=x=y"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parseEnv = %q, %v; want %q", got, err, want)
	}
	if _, err := parseEnv([]string{"=x"}); err == nil {
		t.Error("an empty key was accepted")
	}
}

func TestSplitSandboxPath(t *testing.T) {
	for _, tt := range []struct {
		spec, name, path string
		in               bool
	}{
		{"dev:/etc/hosts", "dev", "/etc/hosts", true},
		{"dev:rel/path", "dev", "rel/path", true},
		{"dev:", "dev", ".", true},
		{"./a:b", "", "./a:b", false},
		{"/abs/a:b", "", "/abs/a:b", false},
		{"plain", "", "plain", false},
		{"-bad:x", "", "-bad:x", false},
	} {
		name, p, in := splitSandboxPath(tt.spec)
		if name != tt.name || p != tt.path || in != tt.in {
			t.Errorf("%q: %q %q %v; want %q %q %v", tt.spec, name, p, in, tt.name, tt.path, tt.in)
		}
	}
}

func TestStartFailureExitCodes(t *testing.T) {
	notFound := &hostapi.StartError{Op: "exec", Path: "x", Err: fs.ErrNotExist}
	denied := &hostapi.StartError{Op: "exec", Path: "x", Err: fs.ErrPermission}
	noDir := &hostapi.StartError{Op: "chdir", Path: "/d", Err: fs.ErrNotExist}
	for _, tt := range []struct {
		err  error
		code int
	}{
		{notFound, ExitNotFound},
		{fmt.Errorf("wrapped: %w", notFound), ExitNotFound},
		{denied, ExitCannotExec},
		{noDir, ExitCannotExec},
		{errors.New("other"), ExitKrunbox},
	} {
		var buf strings.Builder
		if code := report(&buf, notStartedError(tt.err)); code != tt.code || !strings.HasPrefix(buf.String(), "krunbox: ") {
			t.Errorf("%v: exit %d, %q; want %d and a krunbox: line", tt.err, code, buf.String(), tt.code)
		}
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	for _, args := range [][]string{
		{"run", "--memory", "lots", "img"},
		{"run", "-v", "a:b:c:d", "img"},
		{"run", "-p", "99999:80", "img"},
		{"run", "--label", "novalue", "img"},
		{"exec", "only-a-name"},
		{"cp", "a", "b"},
		{"cp", "x:a", "y:b"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != ExitKrunbox || out != "" || !strings.HasPrefix(errOut, "krunbox: ") || !strings.Contains(errOut, "hint: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 125, a krunbox: line and a hint", args, code, out, errOut)
		}
	}
}

// A bad configuration is reported as such, before the check that VMs can
// start here (which fails on this machine without the double).
func TestConfigErrorsComeFirst(t *testing.T) {
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	t.Setenv("KRUNBOX_LIBKRUN", "/nonexistent/libkrun.so.1")
	for _, args := range [][]string{
		{"run", "-v", "/no/such/dir", "img", "true"},
		{"create", "--name", "bad/name", "img"},
		{"create", "-w", "relative", "img"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != ExitKrunbox || strings.Contains(errOut, "cannot start VMs") || !strings.HasPrefix(errOut, "krunbox: ") {
			t.Errorf("%q: exit %d, %q; want the configuration's error, not the host's", args, code, errOut)
		}
	}
}
