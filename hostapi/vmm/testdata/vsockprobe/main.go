// Command vsockprobe is a guest workload for the VM tests: a small static
// program that talks over vsock through guestagent/vmdev.
//
//	vsockprobe dial PORT MSG    connect to the host on PORT, send MSG as a line, print the line it replies
//	vsockprobe serve PORT       accept one host connection on PORT, reply "guest:" + the line it read
//	vsockprobe hello PORT       connect to the host on PORT and write one byte, then exit (benchmark)
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/krunbox/krunbox/guestagent/vmdev"
)

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: vsockprobe dial|serve|hello PORT [MSG]"))
	}
	port64, err := strconv.ParseUint(os.Args[2], 10, 32)
	if err != nil {
		fail(err)
	}
	port := uint32(port64)
	switch os.Args[1] {
	case "hello":
		c, err := vmdev.Dial(port)
		if err != nil {
			fail(err)
		}
		c.Write([]byte{'!'})
		c.Close()
	case "dial":
		c, err := vmdev.Dial(port)
		if err != nil {
			fail(err)
		}
		// Lines both ways, and the guest closes first, once it has the
		// reply: with real libkrun a connection's end races what was
		// still in flight (a reply written just before the host closed
		// was lost in 4 runs of 4 with one emulated CPU in L1).
		if _, err := fmt.Fprintf(c, "%s\n", os.Args[3]); err != nil {
			fail(err)
		}
		reply, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fail(fmt.Errorf("reply %q: %w", reply, err))
		}
		fmt.Print(strings.TrimSuffix(reply, "\n"))
		c.Close()
	case "serve":
		l, err := vmdev.Listen(port)
		if err != nil {
			fail(err)
		}
		fmt.Println("listening")
		c, err := l.Accept()
		if err != nil {
			fail(err)
		}
		// One line, not up to EOF: real libkrun ends the whole connection
		// when the host's end shuts down its writing half.
		msg, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(c, "guest:%s", strings.TrimSuffix(msg, "\n"))
		c.Close()
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "vsockprobe:", err)
	os.Exit(1)
}
