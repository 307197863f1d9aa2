package hostapi_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/krunbox/krunbox/hostapi"
)

// image is the image the examples boot. TestExampleRun runs ExampleRun
// with a local busybox image on the libkrun test double instead.
var image = "alpine"

// One command in a fresh microVM: Run checks the host, pulls the image,
// boots the VM, runs the command and removes the VM, even when a step
// fails or the context ends. A command that ran is a result, whatever its
// exit status; the error is for one that did not run.
func ExampleRun() {
	ctx := context.Background()
	res, err := hostapi.Run(ctx, image, hostapi.Command("sh", "-c", "echo hello from $(uname -s); exit 3"))
	if err != nil {
		// Never ran: no KVM or no libkrun (the error has a Hint), no such
		// image, no such program (*StartError)...
		log.Fatal(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
}

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
	sb, err := host.Create(ctx, hostapi.Config{Image: image, Workspace: "."})
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

// An API key the guest can use but not read: it sees OPENAI_API_KEY set to
// a placeholder, which the host replaces with the value of the host's
// OPENAI_API_KEY, read at each start, in requests to api.example.com only.
func ExampleConfig_secrets() {
	ctx := context.Background()
	host, err := hostapi.NewHost()
	if err != nil {
		log.Fatal(err)
	}
	key, err := hostapi.ParseSecret("OPENAI_API_KEY=env:OPENAI_API_KEY@api.example.com")
	if err != nil {
		log.Fatal(err)
	}
	sb, err := host.Create(ctx, hostapi.Config{Image: "alpine", Network: "public", Secrets: []hostapi.Secret{key}})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Remove(ctx)
}
