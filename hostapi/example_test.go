package hostapi_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/krunbox/krunbox/hostapi"
)

// A sandbox from an image, a command in it, its removal. The program is
// its own VM runner: nothing else to install.
func Example() {
	ctx := context.Background()
	host, err := hostapi.NewHost()
	if err != nil {
		log.Fatal(err)
	}
	// No KVM or no libkrun: say so, with the fix, before pulling.
	if err := host.Preflight(ctx); err != nil {
		var h interface{ Hint() string }
		errors.As(err, &h)
		log.Fatalf("%v (%s)", err, h.Hint())
	}
	sb, err := host.Create(ctx, hostapi.Config{Image: "alpine", Workspace: "."})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Remove(ctx)
	if err := sb.Start(ctx); err != nil {
		log.Fatal(err)
	}
	c := sb.Client()
	defer c.Close()
	res, err := c.Run(ctx, hostapi.Command("uname", "-a"))
	if err != nil {
		log.Fatal(err) // never ran: a *StartError, or the sandbox failed (CheckReady says why)
	}
	if res.ExitCode != 0 {
		fmt.Printf("exited %d: %s", res.ExitCode, res.Stderr)
	} else {
		fmt.Printf("%s", res.Stdout)
	}
}
