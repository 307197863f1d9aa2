package e2e

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

func testNetwork(t *testing.T, e *env) {
	e.pull()
	// A server on the host's loopback. TSI gives the guest the host's
	// network identity, loopback included (under the test double: the
	// host's network namespace); network none gives it none at all.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Write([]byte("pong"))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	url := "http://127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port) + "/"

	r := e.krunbox("run", "--net", "tsi", image, "--", "wget", "-q", "-O", "-", url)
	if r.code != 0 || r.stdout != "pong" || hits.Load() != 1 {
		t.Fatalf("tsi: want the host's server reached; got %s (%d requests)", r, hits.Load())
	}
	r = e.krunbox("run", "--net", "none", image, "--", "wget", "-q", "-O", "-", url)
	if r.code == 0 || strings.Contains(r.stdout, "pong") || hits.Load() != 1 {
		t.Errorf("none: want no route out; got %s (%d requests)", r, hits.Load())
	}
	// Interfaces up besides lo, addresses besides lo's, routes. (libkrunfw's
	// kernel makes a dummy0 of its own, which libkrun's init brings up for
	// TSI only: with none it stays down, without an address.)
	r = e.krunbox("run", "--net", "none", image, "--", "sh", "-c",
		"ip -o link | grep -v ' lo:' | grep -c '[<,]UP[,>]'; ip -o addr | grep -vc ' lo '; ip route | wc -l")
	if r.stdout != "0\n0\n0\n" {
		t.Errorf("none: want only loopback up, no other address and no route; got %s", r)
	}
	checkKrunboxError(t, e.krunbox("run", "--net", "none", "-p", "8080:80", image, "true"), "published ports need a network")
}
