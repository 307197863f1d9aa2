package e2e

import (
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// terminal runs krunbox on a new pseudo-terminal, as its controlling
// terminal, as an interactive shell does.
type terminal struct {
	t      testing.TB
	master *os.File
	slave  *os.File
	out    syncbuf.Buffer
	proc   *os.Process // krunbox
	done   chan struct{}
	code   int
}

func (e *env) onTerminal(rows, cols uint16, args ...string) *terminal {
	t := e.t
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	if err := pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	cmd := e.command(args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, master: master, slave: slave, proc: cmd.Process, done: make(chan struct{})}
	go io.Copy(&term.out, master)
	go func() {
		cmd.Wait()
		term.code = cmd.ProcessState.ExitCode()
		close(term.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-term.done
	})
	return term
}

// termios returns the terminal's current settings, as krunbox left them.
func (term *terminal) termios() *unix.Termios {
	tio, err := unix.IoctlGetTermios(int(term.slave.Fd()), unix.TCGETS)
	if err != nil {
		term.t.Fatal(err)
	}
	return tio
}

func (term *terminal) raw() bool {
	tio := term.termios()
	return tio.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) == 0
}

func (term *terminal) send(s string) {
	if _, err := term.master.Write([]byte(s)); err != nil {
		term.t.Fatal(err)
	}
}

// waitOutput waits until the output holds want, n times.
func (term *terminal) waitOutput(want string, n int) {
	term.t.Helper()
	poll.Until(term.t, "terminal output "+want, 30*time.Second, func() bool { return strings.Count(term.out.String(), want) >= n })
}

func (term *terminal) wait() int {
	select {
	case <-term.done:
	case <-time.After(poll.Scaled(30 * time.Second)):
		term.t.Fatalf("krunbox did not exit; terminal output:\n%s", term.out.String())
	}
	return term.code
}

func testTerminal(t *testing.T, e *env) {
	e.pull()
	e.started("tty")
	term := e.onTerminal(24, 80, "exec", "-it", "tty", "sh")
	// Raw mode: keys go to the guest as bytes, and its terminal echoes.
	poll.Until(t, "raw mode", 30*time.Second, term.raw)
	term.send("stty size; tty\r")
	term.waitOutput("24 80", 1)
	term.waitOutput("/dev/pts/", 1)

	// A resize reaches the guest terminal.
	if err := pty.Setsize(term.master, &pty.Winsize{Rows: 40, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the new size in the guest", 30*time.Second, func() bool {
		// One probe at a time: ask, wait for the answer, look at it.
		answers := func() int {
			return strings.Count(term.out.String(), "24 80") + strings.Count(term.out.String(), "40 100")
		}
		n := answers()
		term.send("stty size\r")
		poll.Until(t, "stty's answer", 30*time.Second, func() bool { return answers() > n })
		return strings.Contains(term.out.String(), "40 100")
	})

	// Ctrl-C is a byte for the guest's terminal, which interrupts its
	// foreground process, not krunbox.
	sleeping := func() bool { return e.krunbox("exec", "tty", "pidof", "sleep").code == 0 }
	term.send("sleep 600\r")
	poll.Until(t, "sleep to run", 30*time.Second, sleeping)
	term.send("\x03")
	poll.Until(t, "Ctrl-C to end sleep", 30*time.Second, func() bool { return !sleeping() })
	term.send("echo status=$?\r")
	term.waitOutput("status=130", 1)
	term.send("exit 5\r")
	if code := term.wait(); code != 5 {
		t.Errorf("exit code %d, want the shell's 5; output:\n%s", code, term.out.String())
	}
	if term.raw() {
		t.Error("krunbox left the terminal in raw mode")
	}

	// run -t -i: Ctrl-C kills the guest process, which krunbox reports.
	term = e.onTerminal(24, 80, "run", "-t", "-i", image, "--", "sleep", "600")
	poll.Until(t, "raw mode", 30*time.Second, term.raw)
	poll.Until(t, "the ad-hoc sandbox's sleep", 30*time.Second, func() bool {
		for name := range e.ls() {
			if name != "tty" && e.krunbox("exec", name, "pidof", "sleep").code == 0 {
				return true
			}
		}
		return false
	})
	term.send("\x03")
	if code := term.wait(); code != 130 {
		t.Errorf("run -ti sleep, Ctrl-C: exit %d, want 130 (SIGINT); output:\n%s", code, term.out.String())
	}
	if term.raw() {
		t.Error("krunbox run left the terminal in raw mode")
	}
}
