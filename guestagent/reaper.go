//go:build linux

package guestagent

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper owns every child of the agent. The agent is a child subreaper, so
// orphans of the processes it started become its children too, and someone
// must wait for them or they stay zombies.
//
// A loop that calls wait4(-1) on SIGCHLD races with any other waiter for a
// particular child (os/exec's Cmd.Wait is the classic): whichever wait4
// comes first takes the exit status. So the agent never waits for a child
// anywhere else: it starts processes through reaper.start, which forks and
// registers the pid under the same lock the reaping loop takes, so a child
// can never be reaped before it is registered, and the loop hands each
// registered child's status to its waiter and drops the others' (orphans').
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	orphans int // orphans reaped, for tests and logs
}

// theReaper is the process's reaper: there can be only one, since any
// other would reap (and drop) children registered with it.
var theReaper = sync.OnceValues(func() (*reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, &os.SyscallError{Syscall: "prctl(PR_SET_CHILD_SUBREAPER)", Err: err}
	}
	r := &reaper{waiting: make(map[int]chan syscall.WaitStatus)}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		r.reap()
		for range sig {
			r.reap()
		}
	}()
	return r, nil
})

// newReaper makes the process a child subreaper and returns its reaper.
func newReaper() (*reaper, error) { return theReaper() }

// start runs fork, which starts one child and returns its pid, and returns
// a channel that receives the child's wait status once it exits.
func (r *reaper) start(fork func() (int, error)) (int, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// reap collects every child that has exited.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
		} else {
			r.orphans++
		}
	}
}

// running returns the number of started processes not yet reaped.
func (r *reaper) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}
