// Command krunbox runs commands inside libkrun microVMs: ad-hoc with
// "krunbox run", or in named, persistent sandboxes.
package main

import "os"

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
