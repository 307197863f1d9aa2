package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// sdkProgram is a user's program importing hostapi, as after `go get`.
const sdkProgram = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	ctx := context.Background()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "sdkuser:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, image string) error {
	h, err := hostapi.NewHost()
	if err != nil {
		return err
	}
	if err := h.Preflight(ctx); err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	sb, err := h.Create(ctx, hostapi.Config{Name: "sdkuser", Image: image})
	if err != nil {
		return err
	}
	defer sb.Remove(ctx)
	if err := sb.Start(ctx); err != nil {
		return err
	}
	c := sb.Client()
	defer c.Close()
	out, err := c.Output(ctx, "echo", "hello from the sandbox")
	if err != nil {
		return err
	}
	fmt.Print(string(out))
	return sb.Stop(ctx)
}
`

// cleanCopy copies the files git tracks in the repository (as they are in
// the working tree) to a new folder: what a clone or the module cache
// holds, without the build outputs (the embedded agents among them).
func cleanCopy(t *testing.T) string {
	t.Helper()
	root := testkrun.RepoRoot()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "krunbox")
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a symlink
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestSDKFromGoGet builds a throwaway module that imports hostapi through
// a replace directive to a clean copy of this repository (no make, so no
// embedded guest agent), and runs a command in a sandbox with it, on the
// libkrun test double: the agent is built from the module's source at
// first use, with nothing to do beyond `go get`.
func TestSDKFromGoGet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program and the guest agent (-short)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	if imageErr != nil {
		t.Skipf("no test image: %v", imageErr)
	}
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double needs namespaces: %v", err)
	}
	lib := testkrun.Library(t)
	clone := cleanCopy(t)
	if _, err := os.Stat(filepath.Join(clone, "hostapi/internal/agentbin/bin/krunbox-agent-linux-"+runtime.GOARCH)); err == nil {
		t.Fatal("the clean copy holds a built agent")
	}

	mod := t.TempDir()
	gomod := "module example.com/sdkuser\n\ngo 1.26.0\n\nrequire github.com/krunbox/krunbox v0.0.0\n\nreplace github.com/krunbox/krunbox => " + clone + "\n"
	sum, err := os.ReadFile(filepath.Join(clone, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": sdkProgram} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What a user who ran `go get` has: the go command's own settings,
	// with the module proxy they name, so that whatever the module cache
	// lacks is fetched as `go get` would (a fresh machine's cache is
	// empty). The build adds what go.sum lacks, as `go get` does.
	goenv := userGoEnv(t)
	build := exec.Command(goBin, "build", "-o", "sdkuser", ".")
	build.Dir = mod
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	build.Env = append(build.Env, goenv...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the throwaway module: %v\n%s", err, out)
	}

	// The program runs with nothing of krunbox's own environment: the
	// agent it builds at first use gets the same go settings.
	home := t.TempDir()
	run := exec.Command(filepath.Join(mod, "sdkuser"), image)
	run.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KRUNBOX_HOME=" + home,
		"KRUNBOX_LIBKRUN=" + lib}, goenv...)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil || stdout.String() != "hello from the sandbox\n" {
		t.Fatalf("the SDK program: %v\nstdout: %q\nstderr: %s", err, stdout.String(), stderr.String())
	}
	built, _ := filepath.Glob(filepath.Join(home, "cache", "agent", "src-*", "krunbox-agent-linux-*"))
	if len(built) != 1 {
		t.Errorf("agents built into the cache: %q, want one", built)
	}
}

// userGoEnv returns, as KEY=VALUE, the go command's settings that decide
// where modules come from and where builds go, as this machine's user has
// them (environment, go env file, the toolchain's defaults).
func userGoEnv(t *testing.T) []string {
	t.Helper()
	keys := []string{"GOPROXY", "GOSUMDB", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOINSECURE", "GOMODCACHE", "GOCACHE", "GOTOOLCHAIN"}
	out, err := exec.Command("go", append([]string{"env", "-json"}, keys...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var vals map[string]string
	if err := json.Unmarshal(out, &vals); err != nil {
		t.Fatalf("go env -json: %v", err)
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env
}
