package confine

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// bindChildEnv makes the test binary run bindChild: the mounts are made in
// a mount namespace of its own, never in the test's.
const bindChildEnv = "_CONFINE_BIND_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(bindChildEnv); dir != "" {
		if err := bindChild(dir); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestBindOver(t *testing.T) {
	_, dir, victim := hostile(t)
	must(t, os.Mkdir(filepath.Join(dir, "ro"), 0o755))
	write(t, filepath.Join(dir, "ro", "hook"), "original")
	write(t, filepath.Join(dir, "config"), "original")
	must(t, os.Mkdir(filepath.Join(dir, "pinned"), 0o755))
	must(t, os.Mkdir(filepath.Join(dir, "old"), 0o755))
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), bindChildEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if uid := os.Geteuid(); uid != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Skipf("no mount namespace: %v", err)
	}
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for p, want := range map[string]string{"ro/hook": "original", "config": "original"} {
		if b, _ := os.ReadFile(filepath.Join(dir, p)); string(b) != want {
			t.Errorf("%s is %q after the child, want %q", p, b, want)
		}
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 1 {
		t.Errorf("victim has %d entries, want 1", len(ents))
	}
}

// bindChild runs in a mount namespace of its own: it protects dir's
// entries and checks what can no longer be done to them.
func bindChild(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	j := func(name string) string { return filepath.Join(dir, name) }
	for _, p := range []struct {
		name string
		ro   bool
	}{{"pinned", false}, {"ro", true}, {"config", true}} {
		if err := BindOver(j(p.name), p.ro); err != nil {
			return err
		}
	}
	// The pre-5.12 way, which this kernel may not need.
	f, err := openNoSymlinks(j("old"), unix.O_PATH)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if err := bindOld(j("old"), int(f.Fd()), &st, true); err != nil {
		return err
	}
	f.Close()
	var errs []error
	check := func(what string, err, want error) {
		if !errors.Is(err, want) {
			errs = append(errs, errors.New(what+": "+errString(err)+", want "+want.Error()))
		}
	}
	check("write into the read-only directory", os.WriteFile(j("ro/new"), nil, 0o644), unix.EROFS)
	check("write into the read-only directory (old API)", os.WriteFile(j("old/new"), nil, 0o644), unix.EROFS)
	_, err = os.OpenFile(j("ro/hook"), os.O_WRONLY, 0)
	check("open the read-only directory's file for writing", err, unix.EROFS)
	_, err = os.OpenFile(j("config"), os.O_WRONLY|os.O_APPEND, 0)
	check("append to the read-only file", err, unix.EROFS)
	check("rename over the read-only file", os.Rename(j("small"), j("config")), unix.EBUSY)
	check("rename the read-only directory", os.Rename(j("ro"), j("ro2")), unix.EBUSY)
	check("rename the pinned directory", os.Rename(j("pinned"), j("pinned2")), unix.EBUSY)
	check("remove the pinned directory", os.Remove(j("pinned")), unix.EBUSY)
	if err := os.WriteFile(j("pinned/ok"), []byte("x"), 0o644); err != nil {
		errs = append(errs, errors.New("write into the pinned directory: "+err.Error()))
	}
	// Refused: symlinks at the path or on the way, FIFOs, sockets.
	for _, name := range []string{"abs", "inside", "secretlink", "abs/secret", "inside/../small", "fifo", "sock", "missing"} {
		if err := BindOver(dir+"/"+name, true); err == nil {
			errs = append(errs, errors.New("BindOver("+name+") succeeded"))
		}
	}
	if err := BindOver(j("fifo"), true); !errors.Is(err, ErrNotRegular) {
		errs = append(errs, errors.New("BindOver(fifo): "+errString(err)+", want ErrNotRegular"))
	}
	return errors.Join(errs...)
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
