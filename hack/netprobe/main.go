// Command netprobe measures, from inside a sandbox, what the network
// benchmark (make bench-net, BENCHMARKS.md) compares between network modes:
//
//	netprobe connect ADDR N   mean time of N TCP connects (and closes), in µs
//	netprobe get URL [NAME:VALUE...]  bytes of an HTTP GET with those
//	                          headers, read to the end, and MB/s
//	netprobe fetch URL [NAME:VALUE...]  the body of a GET with those headers
//	                          (the secrets scenario: HTTPS with the guest's CAs)
//	netprobe hello ADDR NAME  a TLS handshake with ADDR (host:port) asking for
//	                          server name NAME, trusting any certificate;
//	                          prints ok (the SNI scenario: a mismatch is reset)
//	netprobe dns NAME TYPE    one question (TYPE A, AAAA, TXT, MX, ...) to the
//	                          first name server of /etc/resolv.conf, as musl
//	                          asks it; prints the rcode and the number of
//	                          answers (the NODATA scenario)
//	netprobe flood-tcp ADDR N BYTES  opens N TCP connections to ADDR at
//	                          once, writes up to BYTES on each (for at most
//	                          5 s) and holds them all open until every one
//	                          is tried; prints the number opened and the
//	                          number refused (the limits' soak)
//	netprobe flood-file PATH N  appends N bytes of lines to PATH (the
//	                          console: /proc/1/fd/1)
//	netprobe flood-udp ADDR N  one datagram to ADDR from each of N source
//	                          ports (N flows); prints the number sent
//	netprobe watch DIR...     a file watcher, as a dev server's: inotify on
//	                          each DIR, printing "ready", then one line per
//	                          event, "EVENT NAME" (create, modify,
//	                          close_write, attrib, delete, moved_from,
//	                          moved_to, with ",dir" for a directory), until
//	                          killed (the file events scenario)
//
// The flood modes run at the lowest CPU priority: a VM bounds its guest's
// CPU, and on the test double, where the guest's processes are the host's,
// this stands for that bound.
//
// It is built static and copied into the guest by the benchmark.
package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) >= 2 && args[0] == "watch":
		return watch(args[1:])
	case len(args) == 3 && args[0] == "connect":
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 1 {
			return fmt.Errorf("connect: bad count %q", args[2])
		}
		start := time.Now()
		for range n {
			c, err := net.Dial("tcp", args[1])
			if err != nil {
				return err
			}
			c.Close()
		}
		fmt.Printf("%.1f\n", float64(time.Since(start).Microseconds())/float64(n))
		return nil
	case len(args) >= 2 && args[0] == "get":
		req, err := request(args[1], args[2:])
		if err != nil {
			return err
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("get %s: %s", args[1], resp.Status)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			return err
		}
		s := time.Since(start).Seconds()
		fmt.Printf("%d %.1f\n", n, float64(n)/s/1e6)
		return nil
	case len(args) >= 2 && args[0] == "fetch":
		req, err := request(args[1], args[2:])
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("fetch %s: %s", args[1], resp.Status)
		}
		_, err = io.Copy(os.Stdout, resp.Body)
		return err
	case len(args) == 3 && args[0] == "hello":
		d := &net.Dialer{Timeout: 10 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", args[1], &tls.Config{ServerName: args[2], InsecureSkipVerify: true})
		if err != nil {
			return err
		}
		c.Close()
		fmt.Println("ok")
		return nil
	case len(args) == 3 && args[0] == "dns":
		rcode, n, err := ask(args[1], args[2])
		if err != nil {
			return err
		}
		fmt.Println(rcode, n)
		return nil
	case len(args) == 3 && args[0] == "flood-file":
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 0 {
			return fmt.Errorf("flood-file: bad size %q", args[2])
		}
		lowPriority()
		f, err := os.OpenFile(args[1], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		line := []byte("the guest floods this file with this line\n")
		for left := n; left > 0; left -= len(line) {
			if _, err := f.Write(line[:min(left, len(line))]); err != nil {
				f.Close()
				return err
			}
		}
		return f.Close()
	case len(args) == 4 && args[0] == "flood-tcp":
		n, err1 := strconv.Atoi(args[2])
		size, err2 := strconv.Atoi(args[3])
		if err1 != nil || err2 != nil || n < 1 || size < 0 {
			return fmt.Errorf("flood-tcp: bad count %q or size %q", args[2], args[3])
		}
		lowPriority()
		opened, refused := floodTCP(args[1], n, size)
		fmt.Println(opened, refused)
		return nil
	case len(args) == 3 && args[0] == "flood-udp":
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 1 || n > 60000 {
			return fmt.Errorf("flood-udp: bad count %q", args[2])
		}
		lowPriority()
		sent := 0
		for range n {
			c, err := net.Dial("udp", args[1]) // a new source port: a new flow
			if err != nil {
				continue
			}
			if _, err := c.Write([]byte("flood")); err == nil {
				sent++
			}
			c.Close()
		}
		fmt.Println(sent)
		return nil
	}
	return fmt.Errorf("usage: netprobe connect ADDR N | netprobe flood-tcp ADDR N BYTES | netprobe flood-udp ADDR N | netprobe flood-file PATH N | netprobe get URL [NAME:VALUE...] | netprobe fetch URL [NAME:VALUE...] | netprobe hello ADDR NAME | netprobe dns NAME TYPE")
}

// ask sends one question of type typ (its name: A, AAAA, TXT, ...) about
// name to the first name server of /etc/resolv.conf, over UDP, and
// returns the answer's rcode and number of answers.
func ask(name, typ string) (dnsmessage.RCode, int, error) {
	qtype, ok := map[string]dnsmessage.Type{"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "TXT": dnsmessage.TypeTXT, "MX": dnsmessage.TypeMX, "SRV": dnsmessage.TypeSRV, "NS": dnsmessage.TypeNS, "CNAME": dnsmessage.TypeCNAME}[typ]
	if !ok {
		return 0, 0, fmt.Errorf("dns: unknown type %q", typ)
	}
	conf, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return 0, 0, err
	}
	var server string
	for line := range strings.Lines(string(conf)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			server = f[1]
			break
		}
	}
	if server == "" {
		return 0, 0, fmt.Errorf("dns: no name server in /etc/resolv.conf")
	}
	qname, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return 0, 0, fmt.Errorf("dns: %w", err)
	}
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 1, RecursionDesired: true}, Questions: []dnsmessage.Question{{Name: qname, Type: qtype, Class: dnsmessage.ClassINET}}}
	b, err := q.Pack()
	if err != nil {
		return 0, 0, err
	}
	c, err := net.Dial("udp", net.JoinHostPort(server, "53"))
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return 0, 0, err
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		return 0, 0, fmt.Errorf("dns: the answer: %w", err)
	}
	return m.RCode, len(m.Answers), nil
}

// request is a GET of url with headers, each NAME:VALUE.
func request(url string, headers []string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("header %q: want NAME:VALUE", h)
		}
		req.Header.Set(name, strings.TrimSpace(value))
	}
	return req, nil
}

// floodTCP opens n connections to addr at once and writes up to size bytes
// on each, for at most 5 s a connection, holding them all open until
// every one has been tried: how many opened, how many were refused or
// reset while writing.
func floodTCP(addr string, n, size int) (opened, refused int) {
	type result struct {
		c  net.Conn
		ok bool
	}
	results := make(chan result, n)
	buf := make([]byte, 64<<10)
	for range n {
		go func() {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				results <- result{}
				return
			}
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			for left := size; left > 0; left -= len(buf) {
				if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
					// A peer that stops reading is a deadline; a reset
					// is a refusal.
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						c.Close()
						results <- result{}
						return
					}
					break
				}
			}
			results <- result{c: c, ok: true}
		}()
	}
	var conns []net.Conn
	for range n {
		r := <-results
		if r.ok {
			opened++
			conns = append(conns, r.c)
		} else {
			refused++
		}
	}
	for _, c := range conns {
		c.Close()
	}
	return opened, refused
}

// lowPriority lowers this process's CPU priority to the lowest, where it
// can (see the flood modes).
func lowPriority() { syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19) }
