// Command run is the smallest krunbox SDK program: it boots a microVM from
// an image, runs one command in it, prints what it wrote and removes the
// VM.
//
//	go run ./examples/run -image alpine -- uname -a
//
// It needs what krunbox needs (krunbox doctor); KRUNBOX_HOME keeps its
// state apart. No runner binary and no line in main: importing hostapi
// makes the program its own VM runner.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	image := flag.String("image", "alpine", "image to boot")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		args = []string{"uname", "-a"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code, err := run(ctx, *image, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(125)
	}
	os.Exit(code)
}

func run(ctx context.Context, image string, args []string) (int, error) {
	// Checks the host (no KVM, no libkrun: an error with a Hint), pulls,
	// boots, runs, and removes the VM whatever happens. An error means
	// the command never ran (not found...) or the VM failed; a command
	// that ran and failed is a result, with its exit code.
	res, err := hostapi.Run(ctx, image, hostapi.Command(args...))
	if err != nil {
		return 0, err
	}
	os.Stdout.Write(res.Stdout)
	os.Stderr.Write(res.Stderr)
	return res.ExitCode, nil
}
