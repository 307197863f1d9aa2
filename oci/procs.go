package oci

import (
	"os"
	"runtime"
	"sync"

	"github.com/krunbox/krunbox/internal/gunzip"
)

// procs counts the flattens in progress that have raised GOMAXPROCS.
var procs struct {
	sync.Mutex
	users int
	added int
}

// raiseProcs gives the process extraProcs more Go processors (Ps) than
// CPUs while layers are inflated in cgo calls, and returns the function
// that takes them back once the last flatten is done. A cgo call holds
// its P as a system call does: when the pull's other goroutines (the
// applier, the hashers, the downloads) were waiting, the scheduler hands
// the P over, and the inflater waits its turn on return, in the middle of
// the critical path. Spare Ps leave the sharing of the CPUs to the kernel,
// which does it at a finer grain: a cold pull of the Debian benchmark
// image takes 5% less time with two more (BENCHMARKS.md). It does nothing
// when the inflater is Go's, or GOMAXPROCS was set by the environment or
// changed by the program.
func raiseProcs() (restore func()) {
	if !gunzip.InCgo || os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	procs.Lock()
	defer procs.Unlock()
	if procs.users == 0 {
		if n := runtime.GOMAXPROCS(0); n == runtime.NumCPU() {
			runtime.GOMAXPROCS(n + extraProcs)
			procs.added = extraProcs
		}
	}
	procs.users++
	return func() {
		procs.Lock()
		defer procs.Unlock()
		procs.users--
		if procs.users == 0 && procs.added > 0 {
			runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) - procs.added)
			procs.added = 0
		}
	}
}

// extraProcs is one P for each layer inflated ahead of the applier's.
const extraProcs = lookahead
