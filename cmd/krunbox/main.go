// Command krunbox runs commands inside libkrun microVMs: ad-hoc with
// "krunbox run", or in named, persistent sandboxes.
package main

import (
	"os"

	// The VM runner: a krunbox re-executed to run a VM becomes the runner
	// in this package's init, before main (see package vmm).
	_ "github.com/krunbox/krunbox/hostapi/vmm"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
