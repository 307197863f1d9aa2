package netsetup

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// TestConfigure sets up a TAP device standing for the guest's virtio-net
// in a network namespace of the test's own (root, or skipped).
func TestConfigure(t *testing.T) {
	skip := make(chan string, 1)
	go func() {
		defer close(skip)
		// The thread enters a network namespace and dies with the
		// goroutine (never unlocked).
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip <- fmt.Sprintf("no network namespace here: %v", err)
			return
		}
		tun, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
		if err != nil {
			skip <- fmt.Sprintf("no TAP device here: %v", err)
			return
		}
		defer tun.Close()
		ifr, _ := unix.NewIfreq("eth0")
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(int(tun.Fd()), unix.TUNSETIFF, ifr); err != nil {
			skip <- fmt.Sprintf("create a TAP device: %v", err)
			return
		}
		err = Configure(&protocol.NetConfig{
			Interface: "eth0",
			Addresses: []string{"192.168.127.2/24", "fd7b:6b62:6f78::2/64"},
			Gateways:  []string{"192.168.127.1", "fd7b:6b62:6f78::1"},
			MTU:       1400,
		})
		if err != nil {
			t.Errorf("Configure: %v", err)
			return
		}
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			t.Error(err)
			return
		}
		if ifi.Flags&net.FlagUp == 0 || ifi.MTU != 1400 {
			t.Errorf("eth0: flags %v, MTU %d; want up, 1400", ifi.Flags, ifi.MTU)
		}
		addrs, _ := ifi.Addrs()
		var got []string
		for _, a := range addrs {
			got = append(got, a.String())
		}
		s := strings.Join(got, " ")
		if !strings.Contains(s, "192.168.127.2/24") || !strings.Contains(s, "fd7b:6b62:6f78::2/64") {
			t.Errorf("eth0 addresses %s", s)
		}
		route, err := os.ReadFile("/proc/thread-self/net/route")
		if err != nil {
			t.Error(err)
			return
		}
		// The default route: destination 0, gateway 192.168.127.1
		// (little-endian hex 017FA8C0).
		if !strings.Contains(string(route), "eth0\t00000000\t017FA8C0") {
			t.Errorf("no default route via 192.168.127.1:\n%s", route)
		}
		route6, _ := os.ReadFile("/proc/thread-self/net/ipv6_route")
		if !strings.Contains(string(route6), "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd7b6b626f7800000000000000000001") {
			t.Errorf("no IPv6 default route via fd7b:6b62:6f78::1:\n%s", route6)
		}
		// Again: idempotent (an agent restarted in the same guest), and
		// a bad address costs only itself.
		err = Configure(&protocol.NetConfig{Interface: "eth0", Addresses: []string{"bogus", "192.168.127.2/24"}, Gateways: []string{"192.168.127.1"}})
		if err == nil || !strings.Contains(err.Error(), "bogus") || strings.Contains(err.Error(), "192.168.127") {
			t.Errorf("Configure again with a bad address: %v, want an error about it alone", err)
		}
		if err := Configure(&protocol.NetConfig{Interface: "eth9"}); err == nil || !strings.Contains(err.Error(), "eth9") {
			t.Errorf("Configure of a missing interface: %v", err)
		}
	}()
	if why := <-skip; why != "" {
		t.Skip(why)
	}
}
