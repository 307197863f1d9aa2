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
	var exit *hostapi.ExitError
	switch {
	case errors.As(err, &exit):
		fmt.Printf("exited %d: %s", exit.Code, exit.Stderr)
	case err != nil:
		log.Fatal(err) // never ran: a *StartError, or the sandbox failed (CheckReady says why)
	default:
		fmt.Printf("%s", res.Stdout)
	}
}

// An API key the guest can use but not read: it sees OPENAI_API_KEY set to
// a placeholder, which the host replaces with the value of the host's
// OPENAI_API_KEY, read at each start, in requests to api.openai.com only.
func ExampleConfig_secrets() {
	ctx := context.Background()
	host, err := hostapi.NewHost()
	if err != nil {
		log.Fatal(err)
	}
	key, err := hostapi.ParseSecret("OPENAI_API_KEY=env:OPENAI_API_KEY@api.openai.com")
	if err != nil {
		log.Fatal(err)
	}
	sb, err := host.Create(ctx, hostapi.Config{Image: "alpine", Network: "public", Secrets: []hostapi.Secret{key}})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Remove(ctx)
}
