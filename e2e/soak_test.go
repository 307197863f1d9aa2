package e2e

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/logfile"
)

// Soak bounds: what the flooding sandbox's runner may hold on the host
// while its guest floods every resource at once, with the default limits
// (hostapi.DefaultLimits: 512 TCP connections, 512 UDP flows, 64 MiB of
// bulk buffers, 4 MiB a log file).
const (
	soakConns      = 700      // TCP connections the guest tries, past the 512 allowed
	soakConnBytes  = 1 << 20  // written on each to a server that never reads
	soakUDPFlows   = 3000     // one datagram from each source port, past the 512 flows allowed
	soakConsole    = 24 << 20 // written to the console, six times a log file
	soakMaxRSS     = 768 << 20
	soakMaxFDs     = 1400
	soakExecRounds = 15
	// soakMaxSlowdown bounds the quiet sandbox's exec latency under the
	// flood against its idle figure. The target is 2× (BENCHMARKS.md has
	// the measured ratios, 1.0 to 1.8×); the test allows 3× since go test
	// runs other packages on the same cores meanwhile. Before the limits,
	// the flooding runner took gigabytes and the host's descriptors.
	soakMaxSlowdown = 3
)

// testLimitsSoak has one sandbox flood the host's resources at once (TCP
// connections writing to a server that never reads, UDP flows from
// thousands of ports to a server that never answers, its console) while a second sandbox runs commands:
// the flooding guest gets errors, its runner's memory and descriptors stay
// under a bound, its logs under theirs, and the quiet sandbox's exec
// latency stays within twice its idle figure.
func testLimitsSoak(t *testing.T, e *env) {
	e.pull()
	newNetWorld(t, e) // the runner dials 198.51.100.2 as 127.0.0.2
	sink := holdServer(t, "127.0.0.2:0")
	udpSink := udpSinkServer(t, "127.0.0.2:0")
	e.started("quiet", "--cpus", "1")
	floodDir := e.started("flood", "--cpus", "1")
	e.ok("cp", netprobe(t), "flood:/netprobe")
	pid := e.ls()["flood"].Pid
	if pid <= 0 {
		t.Fatalf("no runner pid for the flooding sandbox: %+v", e.ls()["flood"])
	}

	idle := execLatency(t, e, "quiet")

	// The floods, at once. A VM bounds its guest's CPU (its vCPUs); on the
	// test double the guest's processes are the host's, so netprobe's
	// floods run at the lowest priority to stand for that bound; what the
	// host spends for the guest (the runner's network stack, the copying
	// of its console) does not.
	var wg sync.WaitGroup
	var tcpOut, udpOut result
	wg.Add(3)
	go func() {
		defer wg.Done()
		tcpOut = e.krunbox("exec", "flood", "--", "/netprobe", "flood-tcp", "198.51.100.2:"+sink, strconv.Itoa(soakConns), strconv.Itoa(soakConnBytes))
	}()
	go func() {
		defer wg.Done()
		udpOut = e.krunbox("exec", "flood", "--", "/netprobe", "flood-udp", "198.51.100.2:"+udpSink, strconv.Itoa(soakUDPFlows))
	}()
	go func() {
		defer wg.Done()
		e.krunbox("exec", "flood", "--", "/netprobe", "flood-file", "/proc/1/fd/1", strconv.Itoa(soakConsole))
	}()
	peak := sampleRunner(t, pid)
	busy := execLatency(t, e, "quiet")
	wg.Wait()
	rss, fds := peak()
	// The baseline is the slower of the idle figures before and after the
	// flood: go test runs other packages on the same cores meanwhile, and
	// their load comes and goes (a CI run of 2026-12-03: 16 ms idle before,
	// 54 ms under the flood, with the machine's other work at its peak).
	idle = max(idle, execLatency(t, e, "quiet"))

	t.Logf("runner of the flooding sandbox: peak RSS %d MiB, peak fds %d; quiet sandbox exec: idle %v, under the flood %v", rss>>20, fds, idle, busy)
	opened, refused, ok := strings.Cut(strings.TrimSpace(tcpOut.stdout), " ")
	if tcpOut.code != 0 || !ok {
		t.Fatalf("the TCP flood: %s", tcpOut)
	}
	if n, _ := strconv.Atoi(opened); n > 512 {
		t.Errorf("the guest held %s TCP connections at once, over the limit of 512", opened)
	}
	if n, _ := strconv.Atoi(refused); n < soakConns-512 {
		t.Errorf("%s of %d TCP connections refused, want at least %d (the flooding guest gets errors)", refused, soakConns, soakConns-512)
	}
	if udpOut.code != 0 {
		t.Errorf("the UDP flood: %s", udpOut)
	}
	if rss > soakMaxRSS {
		t.Errorf("the flooding sandbox's runner reached %d MiB of memory, over the bound of %d MiB", rss>>20, soakMaxRSS>>20)
	}
	if fds > soakMaxFDs {
		t.Errorf("the flooding sandbox's runner held %d descriptors, over the bound of %d", fds, soakMaxFDs)
	}
	if busy > soakMaxSlowdown*idle {
		t.Errorf("the quiet sandbox's exec took %v under the flood, over %d times its idle %v", busy, soakMaxSlowdown, idle)
	}
	net := e.ok("logs", "--net", "flood")
	for _, limit := range []string{"TCP connections at once (limits.tcp_connections)", "UDP flows at once (limits.udp_flows)"} {
		if !strings.Contains(net, limit) {
			t.Errorf("logs --net does not name the refusals at %q:\n%s", limit, net)
		}
	}
	if size := dirFilesSize(t, floodDir); size > 3*logfile.DefaultMax+1<<20 {
		t.Errorf("the flooding sandbox's directory holds %d MiB of files, over its logs' bound", size>>20)
	}
	// The flood is over: the quiet sandbox still works, and so does the
	// flooding one.
	if out := e.ok("exec", "flood", "--", "echo", "still here"); out != "still here\n" {
		t.Errorf("exec in the flooding sandbox after the flood: %q", out)
	}
}

// holdServer accepts TCP connections on addr and never reads from them,
// until the test ends: its port.
func holdServer(t *testing.T, addr string) string {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen on %s: %v", addr, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// udpSinkServer reads and drops the datagrams sent to addr until the test
// ends: its port.
func udpSinkServer(t *testing.T, addr string) string {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Skipf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
}

// execLatency is the median time of krunbox exec NAME -- true.
func execLatency(t *testing.T, e *env, name string) time.Duration {
	t.Helper()
	times := make([]time.Duration, 0, soakExecRounds)
	for range soakExecRounds {
		start := time.Now()
		if r := e.krunbox("exec", name, "--", "true"); r.code != 0 {
			t.Fatalf("exec in %s: %s", name, r)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	return times[len(times)/2]
}

// sampleRunner samples the memory and descriptors of process pid until
// the function it returns is called, which returns their peaks.
func sampleRunner(t *testing.T, pid int) func() (rss int64, fds int) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	var peakRSS int64
	var peakFDs int
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss := processRSS(pid); rss > peakRSS {
				peakRSS = rss
			}
			if ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd")); err == nil && len(ents) > peakFDs {
				peakFDs = len(ents)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() (int64, int) {
		close(stop)
		<-done
		return peakRSS, peakFDs
	}
}

// processRSS is the resident memory of process pid, in bytes; 0 when it
// cannot be read.
func processRSS(pid int) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
