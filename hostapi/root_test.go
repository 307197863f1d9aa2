package hostapi

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/guestagent/vmdev"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
}

// nobody is the unprivileged user tests run the agent as when they are root.
const nobody = 65534

// unprivileged returns the options that run the agent as a user without
// privileges: none when the tests are not root, else nobody's credentials.
// It skips the test when root cannot start a process as nobody.
func unprivileged(t *testing.T) []agenttest.Option {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	cmd := exec.Command(agenttest.Binary(), "--help")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start the agent as nobody (uid %d): %v", nobody, err)
	}
	cmd.Wait()
	return []agenttest.Option{agenttest.WithCredential(nobody, nobody)}
}

func TestRunAsUser(t *testing.T) {
	requireRoot(t)
	c, _ := newTestClient(t, &protocol.Config{User: "nobody"})
	ctx := testContext(t)
	for _, tt := range []struct{ user, want string }{
		{"", "65534 65534"},        // the config's default user
		{"root", "0 0"},            // by name
		{"0", "0 0"},               // by uid
		{"1234:5678", "1234 5678"}, // ids in no passwd entry
		{"nobody:0", "65534 0"},    // name with a group id
		{"nobody:root", "65534 0"}, // name with a group name
	} {
		res, err := c.Run(ctx, Cmd{Args: []string{"sh", "-c", "echo $(id -u) $(id -g)"}, User: tt.user})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != tt.want {
			t.Errorf("user %q: %q, %v; want %q", tt.user, res.Stdout, err, tt.want)
		}
	}
	res, err := c.Run(ctx, Cmd{Args: []string{"sh", "-c", "echo $HOME $USER"}, User: "root"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "/root root" {
		t.Errorf("HOME and USER of root: %q, %v", res.Stdout, err)
	}
	_, err = c.Run(ctx, Cmd{Args: []string{"true"}, User: "root:no-such-group"})
	if !errors.Is(err, ErrUnknownUser) {
		t.Errorf("unknown group: %v", err)
	}
}

func TestRunAsOtherUserWithoutRoot(t *testing.T) {
	c, _ := newTestClient(t, nil, unprivileged(t)...)
	_, err := c.Run(testContext(t), Cmd{Args: []string{"true"}, User: "0"})
	var se *StartError
	if !errors.As(err, &se) || se.Op != "user" || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("run as root from a non-root agent: %v", err)
	}
}

func TestMountsAndHostname(t *testing.T) {
	requireRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare(1) for a private mount and UTS namespace")
	}
	stand := t.TempDir() // the libkrun test double's stand-in directory
	for _, tag := range []string{"work", "ro"} {
		os.MkdirAll(filepath.Join(stand, "virtiofs", tag), 0o755)
	}
	os.WriteFile(filepath.Join(stand, "virtiofs", "ro", "f"), []byte("read-only"), 0o644)
	guest := t.TempDir()
	cfg := &protocol.Config{
		Hostname:       "krunbox-test",
		SetupOutsideVM: true,
		Mounts: []protocol.Mount{
			{Tag: "work", Path: filepath.Join(guest, "deep/work")},
			{Tag: "ro", Path: filepath.Join(guest, "ro"), ReadOnly: true},
			{Tag: "missing", Path: filepath.Join(guest, "missing")},
		},
	}
	hostHostname, _ := os.Hostname()
	c, a := newTestClient(t, cfg,
		agenttest.WithWrapper(unshare, "--mount", "--uts", "--propagation", "private", "--"),
		agenttest.WithEnv(vmdev.TestDirEnv+"="+stand))
	ctx := testContext(t)

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Mounts) != 3 || info.Mounts[0].Error != "" || info.Mounts[1].Error != "" ||
		!strings.Contains(info.Mounts[2].Error, "missing") {
		t.Fatalf("mounts in the hello: %+v", info.Mounts)
	}
	if log, _ := os.ReadFile(a.Log); !strings.Contains(string(log), "mount failed") {
		t.Errorf("the failed mount is not on the console:\n%s", log)
	}
	if out, err := c.Output(ctx, "hostname"); err != nil || string(out) != "krunbox-test\n" {
		t.Errorf("guest hostname %q, %v", out, err)
	}
	if h, _ := os.Hostname(); h != hostHostname {
		t.Fatalf("the host's hostname changed to %q", h)
	}
	// The shares are mounted where the config says, in the agent's
	// namespace only.
	if b, err := c.ReadFile(ctx, filepath.Join(guest, "ro/f")); err != nil || string(b) != "read-only" {
		t.Fatalf("read through the read-only mount: %q, %v", b, err)
	}
	if err := c.WriteFile(ctx, filepath.Join(guest, "ro/g"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only mount: %v, want EROFS", err)
	}
	if err := c.WriteFile(ctx, filepath.Join(guest, "deep/work/new"), []byte("shared"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(stand, "virtiofs/work/new")); err != nil || string(b) != "shared" {
		t.Errorf("write through the mount did not reach the share: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(guest, "ro/f")); err == nil {
		t.Error("the mount leaked into the host's namespace")
	}
}

// In a user namespace where setgroups is denied (the runner's, for a caller
// who is not root, which an agent under the test double shares), the agent
// still runs processes: it keeps its groups instead of failing.
func TestRunWhereSetgroupsIsDenied(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare(1)")
	}
	if err := exec.Command(unshare, "--user", "--map-root-user", "true").Run(); err != nil {
		t.Skipf("no user namespaces here: %v", err)
	}
	c, _ := newTestClient(t, nil, agenttest.WithWrapper(unshare, "--user", "--map-root-user", "--"))
	out, err := c.Output(testContext(t), "sh", "-c", "cat /proc/self/setgroups; id -u")
	if err != nil || string(out) != "deny\n0\n" {
		t.Fatalf("run with setgroups denied: %q, %v", out, err)
	}
}
