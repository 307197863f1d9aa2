// Command benchpi is the baseline of "make bench-pi": the same operations as
// the pi extension's read and bash tools, made directly with hostapi's agent
// client on a running sandbox, one at a time as pi/bench/overhead.ts asks,
// so that both sides are measured interleaved in one run:
//
//	go run ./hack/benchpi SANDBOX
//
// reads requests from stdin, one a line, and answers each with the time the
// operation took, in nanoseconds, on stdout:
//
//	read PATH    Client.ReadFile of a guest file
//	run ARG...   Client.Run of a command (the extension's bash: SHELL -c true)
//
// The sandbox is found in the state directory of KRUNBOX_HOME (or XDG).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchpi SANDBOX (requests on stdin: read PATH | run ARG...)")
		os.Exit(2)
	}
	if err := serve(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "benchpi: %v\n", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, name string) error {
	h, err := hostapi.NewHost()
	if err != nil {
		return err
	}
	sb, err := h.Get(name)
	if err != nil {
		return err
	}
	c := sb.Client()
	defer c.Close()
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		op, arg, _ := strings.Cut(in.Text(), " ")
		t0 := time.Now()
		switch op {
		case "read":
			_, err = c.ReadFile(ctx, arg)
		case "run":
			var res *hostapi.RunResult
			if res, err = c.Run(ctx, hostapi.Command(strings.Fields(arg)...)); err == nil {
				err = res.Err()
			}
		default:
			err = errors.New("unknown request " + op)
		}
		elapsed := time.Since(t0)
		if err != nil {
			return fmt.Errorf("%s %s: %w", op, arg, err)
		}
		fmt.Fprintln(out, elapsed.Nanoseconds())
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return in.Err()
}
