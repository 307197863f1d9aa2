// Package setup tests what make runs around the build: hack/setup/deps.sh,
// the checks and installs that make test (make deps) and make build
// (check-build) run first, and hack/makeexit, make run's exit code.
package setup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// repo is a copy of what deps.sh reads of the repository (go.mod, pi/'s lock
// file and node_modules) around the script, so that a test decides what is
// installed.
type repo struct {
	dir string
	bin string // first on PATH: fake tools
	log string // what the fake tools were called with
}

func newRepo(t *testing.T) *repo {
	t.Helper()
	r := &repo{dir: t.TempDir(), bin: t.TempDir()}
	r.log = filepath.Join(r.bin, "calls.log")
	script, err := os.ReadFile("deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	r.write(t, "hack/setup/deps.sh", string(script), 0o755)
	r.write(t, "go.mod", string(gomod), 0o644)
	r.write(t, "pi/package-lock.json", "{}", 0o644)
	// The MCP Inspector's modules are there and current: the cases below
	// decide pi's (npm_deps treats both folders alike).
	r.write(t, "hack/mcpinspector/package-lock.json", "{}", 0o644)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(r.dir, "hack/mcpinspector/package-lock.json"), old, old); err != nil {
		t.Fatal(err)
	}
	r.write(t, "hack/mcpinspector/node_modules/.package-lock.json", "{}", 0o644)
	return r
}

func (r *repo) write(t *testing.T, name, body string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// fake puts a tool on PATH that runs the shell code body after logging how
// it was called.
func (r *repo) fake(t *testing.T, name, body string) {
	t.Helper()
	script := "#!/bin/sh\necho \"" + name + " $*\" >>" + r.log + "\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(r.bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs deps.sh with args, the fake tools first on PATH.
func (r *repo) run(t *testing.T, env []string, args ...string) (code int, out string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(r.dir, "hack/setup/deps.sh"), args...)
	cmd.Env = append(os.Environ(), "PATH="+r.bin+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(b)
}

func (r *repo) calls(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func goMin(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH: %v", tool, err)
		}
	}
}

// TestCheckToolchains runs the toolchain check with fake tools that report
// versions too old, as a fresh Debian 12 has them: it must stop, saying
// which version it found and which it needs.
func TestCheckToolchains(t *testing.T) {
	needTools(t, "go", "node", "npm", "cc", "git")
	tests := []struct {
		name  string
		tools map[string]string // fake tools: name → shell code
		env   []string
		check []string
		want  string // "" when the check passes
	}{
		{"what this machine has", nil, nil, []string{"go", "node", "cc", "git"}, ""},
		{"Debian 12's Go", map[string]string{"go": `[ "$1" = env ] && echo go1.19.8 || echo "go version go1.19.8 linux/amd64"`}, nil,
			[]string{"go"}, "deps: Go 1.19.8 is too old: krunbox needs Go " + goMin(t) + " or later (go.mod). Install it from https://go.dev/dl/"},
		{"a Go that predates go env GOVERSION", map[string]string{"go": `[ "$1" = env ] && exit 2; echo "go version go1.15.2 linux/amd64"`}, nil,
			[]string{"go"}, "deps: Go 1.15.2 is too old"},
		{"a Go with an experiment", map[string]string{"go": `echo "go` + goMin(t) + ` X:nodwarf5"`}, nil, []string{"go"}, ""},
		{"no Go", nil, []string{"GO=/nonexistent/go"}, []string{"go"}, "deps: no Go toolchain (/nonexistent/go): install Go " + goMin(t)},
		{"Debian 12's Node", map[string]string{"node": "echo v18.19.0", "npm": "true"}, nil,
			[]string{"node"}, "deps: Node 18.19.0 is too old: the pi extension's tests need Node 20.18.1 or later"},
		{"Node 20.6, which pi 0.73's undici refuses", map[string]string{"node": "echo v20.6.0", "npm": "true"}, nil,
			[]string{"node"}, "deps: Node 20.6.0 is too old"},
		{"Node 22", map[string]string{"node": "echo v22.19.0", "npm": "true"}, nil, []string{"node"}, ""},
		{"no C compiler", nil, []string{"CC=/nonexistent/cc"}, []string{"cc"}, "deps: no C compiler (/nonexistent/cc)"},
		{"both old: both said", map[string]string{"go": "echo go1.19.8", "node": "echo v18.19.0", "npm": "true"}, nil,
			[]string{"go", "node"}, "deps: Go 1.19.8 is too old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRepo(t)
			for name, body := range tt.tools {
				r.fake(t, name, body)
			}
			start := time.Now()
			code, out := r.run(t, tt.env, append([]string{"check"}, tt.check...)...)
			if tt.want == "" {
				if code != 0 || out != "" {
					t.Errorf("check %v: exit %d, %q; want 0 and nothing said", tt.check, code, out)
				}
				t.Logf("check %v took %v", tt.check, time.Since(start))
				return
			}
			if code != 1 || !strings.Contains(out, tt.want) {
				t.Errorf("check %v: exit %d, %q; want 1 and %q", tt.check, code, out, tt.want)
			}
			if len(tt.check) == 2 && !strings.Contains(out, "Node 18.19.0 is too old") {
				t.Errorf("check %v: %q; want every problem said, not only the first", tt.check, out)
			}
		})
	}
}

// TestDepsInstalls runs make deps' script with fake dpkg-query, id, apt-get
// and npm: it installs the missing packages as root, says the command to
// run otherwise, and runs npm ci in pi/ only when node_modules is missing
// or older than the lock file.
func TestDepsInstalls(t *testing.T) {
	needTools(t, "go", "node", "npm", "cc", "git")
	const pkgs = "busybox-static tmux btrfs-progs ca-certificates nasm e2fsprogs"
	tests := []struct {
		name      string
		installed string // what dpkg-query says is installed
		uid       string
		modules   string // pi/node_modules: "", "fresh" or "stale"
		wantCode  int
		wantOut   string
		wantCalls []string // in order
		notCalled []string
	}{
		{"fresh machine, root", "", "0", "", 0, "deps: installing " + pkgs,
			[]string{"apt-get update -q", "apt-get install -y -q --no-install-recommends " + pkgs, "npm ci --no-audit --no-fund"}, nil},
		{"fresh machine, not root", "", "1000", "", 1,
			"sudo apt-get install -y --no-install-recommends " + pkgs, nil, []string{"apt-get", "npm ci"}},
		{"one package missing, not root", "busybox-static btrfs-progs ca-certificates nasm e2fsprogs", "1000", "fresh", 1,
			"sudo apt-get install -y --no-install-recommends tmux\n", nil, []string{"apt-get", "npm ci"}},
		{"everything there", pkgs, "1000", "fresh", 0, "", nil, []string{"apt-get", "npm"}},
		{"lock file newer than node_modules", pkgs, "1000", "stale", 0, "older than pi/package-lock.json",
			[]string{"npm ci --no-audit --no-fund"}, []string{"apt-get"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRepo(t)
			r.fake(t, "dpkg-query", `for p in `+tt.installed+`; do [ "$p" = "$3" ] && { echo "install ok installed"; exit 0; }; done; echo "unknown ok not-installed"`)
			r.fake(t, "id", `echo `+tt.uid)
			r.fake(t, "apt-get", "true")
			r.fake(t, "npm", "true")
			lock := filepath.Join(r.dir, "pi/package-lock.json")
			switch tt.modules {
			case "fresh":
				r.write(t, "pi/node_modules/.package-lock.json", "{}", 0o644)
			case "stale":
				r.write(t, "pi/node_modules/.package-lock.json", "{}", 0o644)
				old := time.Now().Add(-time.Hour)
				if err := os.Chtimes(filepath.Join(r.dir, "pi/node_modules/.package-lock.json"), old, old); err != nil {
					t.Fatal(err)
				}
			default:
				old := time.Now().Add(-time.Hour)
				if err := os.Chtimes(lock, old, old); err != nil {
					t.Fatal(err)
				}
			}
			code, out := r.run(t, nil, "test")
			if code != tt.wantCode || (tt.wantOut == "") != (out == "") || !strings.Contains(out, tt.wantOut) {
				t.Errorf("exit %d, %q; want %d and %q", code, out, tt.wantCode, tt.wantOut)
			}
			calls := r.calls(t)
			rest := calls
			for _, c := range tt.wantCalls {
				i := strings.Index(rest, c+"\n")
				if i < 0 {
					t.Errorf("calls %q: want %q (in this order: %q)", calls, c, tt.wantCalls)
					break
				}
				rest = rest[i+len(c):]
			}
			for _, c := range tt.notCalled {
				if strings.Contains(calls, "\n"+c) || strings.HasPrefix(calls, c) {
					t.Errorf("calls %q: want no %q", calls, c)
				}
			}
		})
	}
}

// TestMakeChecksFirst runs make test and make build in this repository with
// Debian 12's Go first on PATH: each stops at once with the message, before
// any go command (the fake go fails anything but reporting its version).
func TestMakeChecksFirst(t *testing.T) {
	needTools(t, "make", "node", "npm", "cc", "git")
	r := newRepo(t)
	r.fake(t, "go", `case "$1" in env) echo go1.19.8 ;; version) echo "go version go1.19.8 linux/amd64" ;; *) exit 1 ;; esac`)
	for _, goal := range []string{"test", "build", "run"} {
		t.Run(goal, func(t *testing.T) {
			cmd := exec.Command("make", "--no-print-directory", "-C", "../..", goal)
			cmd.Env = append(os.Environ(), "PATH="+r.bin+":"+os.Getenv("PATH"), "MAKEFLAGS=")
			b, err := cmd.CombinedOutput()
			out := string(b)
			if err == nil || !strings.Contains(out, "deps: Go 1.19.8 is too old") {
				t.Errorf("make %s: %v, %q; want it stopped by the check", goal, err, out)
			}
			if calls := r.calls(t); strings.Contains(calls, "go build") || strings.Contains(calls, "go vet") {
				t.Errorf("make %s ran go before the check stopped it: %q", goal, calls)
			}
		})
	}
}
