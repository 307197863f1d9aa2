package oci

import (
	"runtime"
	"testing"

	"github.com/krunbox/krunbox/internal/gunzip"
)

func TestRaiseProcs(t *testing.T) {
	if !gunzip.InCgo {
		t.Skip("the inflater of this build is Go's: raiseProcs does nothing (build with -tags krunbox_isal)")
	}
	t.Setenv("GOMAXPROCS", "")
	ncpu := runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(ncpu))

	first := raiseProcs()
	if got := runtime.GOMAXPROCS(0); got != ncpu+extraProcs {
		t.Fatalf("GOMAXPROCS %d during a flatten, want %d", got, ncpu+extraProcs)
	}
	second := raiseProcs() // a concurrent flatten adds none
	if got := runtime.GOMAXPROCS(0); got != ncpu+extraProcs {
		t.Fatalf("GOMAXPROCS %d during two flattens, want %d", got, ncpu+extraProcs)
	}
	first()
	if got := runtime.GOMAXPROCS(0); got != ncpu+extraProcs {
		t.Fatalf("GOMAXPROCS %d while one flatten runs on, want %d", got, ncpu+extraProcs)
	}
	second()
	if got := runtime.GOMAXPROCS(0); got != ncpu {
		t.Fatalf("GOMAXPROCS %d after the flattens, want %d back", got, ncpu)
	}

	// A setting of the program's own is left alone.
	runtime.GOMAXPROCS(ncpu + 5)
	raiseProcs()()
	if got := runtime.GOMAXPROCS(0); got != ncpu+5 {
		t.Fatalf("GOMAXPROCS %d, want the program's %d untouched", got, ncpu+5)
	}
	runtime.GOMAXPROCS(ncpu)
	t.Setenv("GOMAXPROCS", "1")
	restore := raiseProcs()
	if got := runtime.GOMAXPROCS(0); got != ncpu {
		t.Fatalf("GOMAXPROCS %d with GOMAXPROCS set in the environment, want %d untouched", got, ncpu)
	}
	restore()
}
