package vmm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/netpolicy"
	"github.com/krunbox/krunbox/internal/netstack"
	"github.com/krunbox/krunbox/krun"
)

// Files of a VM directory for the network stack.
const (
	// NetLogFile receives, one JSON object ([netstack.Refusal]) a line,
	// what the network policy refused, kept across boots and bounded by
	// Spec.LogMax (package logfile).
	NetLogFile = "net.log"
	// NetSocket is where the runner serves network rule changes
	// ([ChangeNetwork]) while the VM runs with krunbox's stack.
	NetSocket = "net.sock"
)

// Test hooks, so that tests serve "the internet" from the host's loopback:
// TestDNSEnv names the upstream DNS server (host:port); TestLoopbackEnv=1
// dials 198.51.100.N as 127.0.0.N and counts that range as public. They
// are honoured under the libkrun test double, and under a real libkrun
// only with TestRealEnv=1 too (hack/realvm runs the network scenarios in
// nested real VMs, their servers on L1's loopback). Only the environment
// of the process that starts the runner sets them, never the guest.
const (
	TestDNSEnv      = "KRUNBOX_TEST_NET_DNS"
	TestLoopbackEnv = "KRUNBOX_TEST_NET_LOOPBACK"
	TestRealEnv     = "KRUNBOX_TEST_NET_REAL"
)

// testPublic is the range TestLoopbackEnv redirects.
var testPublic = netip.MustParsePrefix("198.51.100.0/24")

// netFeatures are the virtio-net features krunbox's stack gives the guest:
// what lets the link run at MTU [netstack.MTU] (65520, passt's), so that
// a frame carries up to 64 KiB of a TCP stream instead of 1460 bytes.
//
// Checked against libkrun 1.19 (src/devices/src/virtio/net) and Linux's
// drivers/net/virtio_net.c:
//   - libkrun's unixstream backend (unixstream.rs read_frame) prepends a
//     zeroed virtio_net_hdr to every frame for the guest: no GSO type, no
//     checksum flags; its buffers hold MAX_BUFFER_SIZE (65562) bytes, a
//     12-byte header and a frame of up to 65550; a frame larger than the
//     guest's receive buffer is dropped (worker.rs
//     write_frame_to_guest_impl: DescriptorChainTooSmall). The device
//     offers only these bits (with MAC, VERSION_1, EVENT_IDX): no
//     MRG_RXBUF, no MTU.
//   - Linux's virtnet_probe sets max_mtu to MAX_MTU (65535) when the device
//     has no MTU feature, so the agent may set 65520; virtnet_set_big_packets
//     posts receive buffers of MAX_SKB_FRAGS+1 pages (72 KiB) when guest TSO
//     is negotiated (virtnet_check_guest_gso), else 1518 bytes
//     (GOOD_PACKET_LEN). receive_big accepts up to (MAX_SKB_FRAGS+1) pages,
//     and a zeroed header (gso_type NONE, no NEEDS_CSUM/DATA_VALID flag)
//     is a plain frame whose checksums the guest checks itself.
//   - The guest's transmit side needs nothing: without VIRTIO_NET_F_CSUM
//     the driver sets neither NETIF_F_HW_CSUM nor NETIF_F_SG, so the guest
//     sends whole frames of up to its MTU with full checksums. CSUM (and
//     HOST_TSO, which needs it) must NOT be offered: libkrun strips the
//     header from the guest's frames, so partial checksums would reach the
//     stack unfinished.
//
// GUEST_CSUM comes with the TSO bits (the virtio spec requires it); the
// stack never sends a partial checksum, so it changes nothing else.
const netFeatures = krun.NetFeatureGuestCSUM | krun.NetFeatureGuestTSO4 | krun.NetFeatureGuestTSO6

// configureNet gives the guest its network device for a mode of krunbox's
// stack: a virtio-net device on one end of a socket pair, whose other end
// it returns. Other modes return nil.
func configureNet(ctx *krun.Context, lib *krun.Library, spec *Spec) (*os.File, error) {
	np, err := spec.Network.Policy()
	if err != nil || !np.UsesStack() {
		return nil, err
	}
	// No TSI: a net device turns libkrun's implicit TSI off; where the
	// library can say so (1.17), say it too.
	if lib.Has("krun_disable_implicit_vsock") && lib.Has("krun_add_vsock") {
		if err := ctx.DisableImplicitVsock(); err != nil {
			return nil, fmt.Errorf("network %s: %w", np.Mode, err)
		}
		if err := ctx.AddVsock(0); err != nil {
			return nil, fmt.Errorf("network %s: %w", np.Mode, err)
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("network %s: socket pair: %w", np.Mode, err)
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	}
	if err := ctx.AddNetUnixstream(fds[1], [6]byte(netstack.GuestMAC), netFeatures); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("network %s: %w", np.Mode, err)
	}
	return os.NewFile(uintptr(fds[0]), "net"), nil
}

// startNet serves the guest's link on host (configureNet's end) with the
// policy of spec, logging refusals in dir, publishing spec's ports and
// serving rule changes on dir's NetSocket.
func startNet(dir string, spec *Spec, lib *krun.Library, host *os.File) (*netstack.Stack, error) {
	np, err := spec.Network.Policy()
	if err != nil {
		return nil, err
	}
	conn, err := net.FileConn(host)
	host.Close()
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var opts netpolicy.Options
	cfg := netstack.Config{Log: log, Limits: spec.NetLimits}
	if lib.IsTestDouble() || os.Getenv(TestRealEnv) == "1" {
		cfg.DNS = os.Getenv(TestDNSEnv)
		if os.Getenv(TestLoopbackEnv) == "1" {
			opts.Public = []netip.Prefix{testPublic}
			cfg.Redirect = func(dst netip.AddrPort) netip.AddrPort {
				if !testPublic.Contains(dst.Addr()) {
					return dst
				}
				b := dst.Addr().As4()
				return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, b[3]}), dst.Port())
			}
		}
	}
	cfg.Policy = netpolicy.New(np, opts)
	if cfg.Interceptor, err = secretsInterceptor(dir, spec, log); err != nil {
		conn.Close()
		return nil, fmt.Errorf("network: %w", err)
	}
	nl, err := logfile.NewWriter(filepath.Join(dir, NetLogFile), spec.logMax())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("network log: %w", err)
	}
	cfg.OnRefuse = func(r netstack.Refusal) {
		b, _ := json.Marshal(r)
		nl.Write(append(b, '\n'))
	}
	st, err := netstack.Start(conn, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	for _, pm := range spec.PortMap {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), pm.Host)
		if pm.HostIP != "" {
			addr = netip.AddrPortFrom(netip.MustParseAddr(pm.HostIP), pm.Host)
		}
		l, err := net.Listen("tcp", addr.String())
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("publish port %d: %w", pm.Guest, err)
		}
		st.Publish(l, pm.Guest)
	}
	if err := serveNetControl(filepath.Join(dir, NetSocket), cfg.Policy, st); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// NetChange is a request to the runner's NetSocket.
type NetChange struct {
	// Op is "allow", "deny" or "show".
	Op    string   `json:"op"`
	Rules []string `json:"rules,omitempty"`
}

// NetReply is the runner's answer to a NetChange.
type NetReply struct {
	// Network is the setting after the change.
	Network string `json:"network,omitempty"`
	Error   string `json:"error,omitempty"`
}

// maxNetRequest bounds one request on the NetSocket.
const maxNetRequest = 64 << 10

func serveNetControl(path string, p *netpolicy.Policy, st *netstack.Stack) error {
	os.Remove(path)
	short, err := shortSocketPath(path)
	if err != nil {
		return fmt.Errorf("network control socket: %w", err)
	}
	l, err := net.Listen("unix", short)
	if err != nil {
		return fmt.Errorf("network control socket: %w", err)
	}
	go func() {
		<-st.Done()
		l.Close()
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var req NetChange
				if err := json.NewDecoder(bufio.NewReader(&limitedConn{c, maxNetRequest})).Decode(&req); err != nil {
					json.NewEncoder(c).Encode(NetReply{Error: "bad request: " + err.Error()})
					return
				}
				json.NewEncoder(c).Encode(applyNetChange(p, req))
			}()
		}
	}()
	return nil
}

func applyNetChange(p *netpolicy.Policy, req NetChange) NetReply {
	rules, err := netpolicy.ParseRules(req.Rules)
	if err == nil {
		switch req.Op {
		case "allow":
			err = p.Allow(rules)
		case "deny":
			err = p.Deny(rules)
		case "show":
		default:
			err = fmt.Errorf("unknown operation %q", req.Op)
		}
	}
	if err != nil {
		return NetReply{Error: err.Error()}
	}
	return NetReply{Network: p.Spec().String()}
}

type limitedConn struct {
	c net.Conn
	n int64
}

func (l *limitedConn) Read(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too large")
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.c.Read(b)
	l.n -= int64(n)
	return n, err
}

// ChangeNetwork asks the runner of the VM in dir to change its network
// rules (op "allow" or "deny"; "show" changes nothing) and returns the
// setting after the change.
func ChangeNetwork(dir, op string, rules []string) (string, error) {
	short, err := shortSocketPath(filepath.Join(dir, NetSocket))
	if err != nil {
		return "", err
	}
	c, err := net.Dial("unix", short)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ECONNREFUSED) {
			return "", fmt.Errorf("change the network: %w (or its network is not one of krunbox's stack: public, open, allow=)", ErrNotRunning)
		}
		return "", fmt.Errorf("change the network: %w", err)
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(NetChange{Op: op, Rules: rules}); err != nil {
		return "", fmt.Errorf("change the network: %w", err)
	}
	var r NetReply
	if err := json.NewDecoder(bufio.NewReader(&limitedConn{c, maxNetRequest})).Decode(&r); err != nil {
		return "", fmt.Errorf("change the network: %w", err)
	}
	if r.Error != "" {
		return "", fmt.Errorf("change the network: %s", strings.TrimSpace(r.Error))
	}
	return r.Network, nil
}
