// Command sdkprogram is an ordinary Go program using the SDK's VM layer:
// its main has no runner line, and no runner binary is installed, yet it
// can start VMs, because importing hostapi/vmm makes it its own runner.
//
//	sdkprogram DIR    start the VM whose spec is in DIR, wait, print its exit code
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/krunbox/krunbox/hostapi/vmm"
)

func main() {
	spec, err := vmm.ReadSpec(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	v, err := vmm.Start(context.Background(), os.Args[1], spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	es, err := v.Wait(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(es.Code)
}
