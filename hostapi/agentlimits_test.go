package hostapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/poll"
)

// testLimits are small bounds, for the hostile agent to go far past them
// quickly.
var testLimits = AgentLimits{MaxDirEntries: 1000, MaxDirBytes: 1 << 20, MaxReadFile: 1 << 20, MaxOutput: 1 << 20}

// floodMax is how much a hostile agent sends at most: far more than
// testLimits, and than the heap bound the tests check.
const floodMax = 512 << 20

// heapBound is how far the host's heap may rise while the agent floods it.
const heapBound = 32 << 20

// rogueDir answers Lstat with a directory and ReadDir with listing(path);
// other requests fail.
func rogueDir(listing func(s *rogueStream, path string)) func(*rogueStream) {
	return func(s *rogueStream) {
		var req protocol.PathRequest
		protocol.Decode(s.req.Body, &req)
		switch s.req.Type {
		case protocol.TypeStat:
			s.reply(protocol.TypeReply, protocol.FlagEnd, protocol.Encode(&protocol.FileInfo{Name: req.Path, Mode: sIFDIR | 0o755}))
		case protocol.TypeReadDir:
			if s.reply(protocol.TypeReply, 0, nil) != nil {
				return
			}
			listing(s, req.Path)
			s.eof(protocol.ChanOut)
		default:
			s.reply(protocol.TypeError, protocol.FlagEnd, protocol.Encode(&protocol.Error{Code: "ENOSYS", Message: "no"}))
		}
	}
}

// entries returns the JSON lines of n entries named prefix0, prefix1...,
// the first a directory.
func entries(prefix string, n int) []byte {
	var b bytes.Buffer
	for i := range n {
		mode := uint32(0o100644)
		if i == 0 {
			mode = sIFDIR | 0o755
		}
		b.Write(protocol.Encode(&protocol.FileInfo{Name: fmt.Sprintf("%s%d", prefix, i), Mode: mode}))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// execFlood answers Exec by flooding ch with p until it is cancelled, then
// says the process was killed.
func execFlood(ch protocol.Channel, p []byte) func(*rogueStream) {
	return func(s *rogueStream) {
		if s.req.Type != protocol.TypeExec {
			return
		}
		s.reply(protocol.TypeExecStarted, 0, protocol.Encode(&protocol.ExecStarted{Pid: 42}))
		s.flood(ch, p, protocol.MaxChunk, floodMax)
		s.waitStopped()
		s.reply(protocol.TypeExecExit, protocol.FlagEnd, protocol.Encode(&protocol.ExecExit{Code: 137, Signal: "SIGKILL"}))
	}
}

// TestAgentLimits has a hostile agent send far more than each bound of
// AgentLimits: the call fails with a *LimitError naming the bound, the
// host's heap stays within heapBound, and the agent is stopped soon after
// the bound.
func TestAgentLimits(t *testing.T) {
	mib := bytes.Repeat([]byte("a"), 1<<20)
	tests := []struct {
		name  string
		serve func(*rogueStream)
		call  func(ctx context.Context, c *Client) error
		// limit is the AgentLimits field the call goes over, or "" for
		// a bound of the protocol, want.
		limit, want string
	}{{
		name: "ReadDir, one endless entry",
		serve: rogueDir(func(s *rogueStream, _ string) {
			if s.data(protocol.ChanOut, []byte(`{"name":"`), protocol.MaxChunk) == nil {
				s.flood(protocol.ChanOut, mib, protocol.MaxChunk, floodMax)
			}
		}),
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ReadDir(ctx, "/d")
			return err
		},
		want: fmt.Sprintf("a directory entry over %d bytes", maxDirEntryBytes),
	}, {
		name: "ReadDir, endless entries of 4 KiB",
		serve: rogueDir(func(s *rogueStream, _ string) {
			e := protocol.Encode(&protocol.FileInfo{Name: strings.Repeat("n", 4<<10), Mode: 0o100644})
			s.flood(protocol.ChanOut, append(e, '\n'), protocol.MaxChunk, floodMax)
		}),
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ReadDir(ctx, "/d")
			return err
		},
		limit: "MaxDirBytes",
	}, {
		name: "ReadDir, endless small entries",
		serve: rogueDir(func(s *rogueStream, _ string) {
			s.flood(protocol.ChanOut, entries("f", 1000), protocol.MaxChunk, floodMax)
		}),
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ReadDir(ctx, "/d")
			return err
		},
		limit: "MaxDirEntries",
	}, {
		// Each directory lists 600 entries, the first a directory: a walk
		// holds the listings of the directories it is in.
		name: "WalkDir, endless depth of large listings",
		serve: rogueDir(func(s *rogueStream, _ string) {
			s.data(protocol.ChanOut, entries("d", 600), protocol.MaxChunk)
		}),
		call: func(ctx context.Context, c *Client) error {
			return c.WalkDir(ctx, "/d", func(_ string, _ fs.DirEntry, err error) error { return err })
		},
		limit: "MaxDirEntries",
	}, {
		name: "CopyOut, endless depth of large listings",
		serve: rogueDir(func(s *rogueStream, _ string) {
			s.data(protocol.ChanOut, entries("d", 600), protocol.MaxChunk)
		}),
		call: func(ctx context.Context, c *Client) error {
			return c.CopyOut(ctx, "/d", filepath.Join(t.TempDir(), "out"))
		},
		limit: "MaxDirEntries",
	}, {
		name: "ReadFile, endless data",
		serve: func(s *rogueStream) {
			if s.req.Type != protocol.TypeReadFile {
				return
			}
			s.reply(protocol.TypeReply, 0, protocol.Encode(&protocol.FileInfo{Name: "f", Size: 10, Mode: 0o100644}))
			s.flood(protocol.ChanOut, mib, protocol.MaxChunk, floodMax)
		},
		call: func(ctx context.Context, c *Client) error {
			_, err := c.ReadFile(ctx, "/f")
			return err
		},
		limit: "MaxReadFile",
	}, {
		name:  "Output, endless stdout",
		serve: execFlood(protocol.ChanOut, mib),
		call: func(ctx context.Context, c *Client) error {
			_, err := c.Output(ctx, "yes")
			return err
		},
		limit: "MaxOutput",
	}, {
		name:  "Run, endless stderr",
		serve: execFlood(protocol.ChanErr, mib),
		call: func(ctx context.Context, c *Client) error {
			_, err := c.Run(ctx, Command("yes"))
			return err
		},
		limit: "MaxOutput",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &rogueAgent{serve: tt.serve}
			c := startRogue(t, a, WithAgentLimits(testLimits))
			var err error
			peak := heapPeak(func() { err = tt.call(testContext(t), c) })
			var le *LimitError
			switch {
			case tt.limit != "" && (!errors.As(err, &le) || le.Limit != tt.limit || !strings.Contains(err.Error(), "AgentLimits."+tt.limit)):
				t.Fatalf("err = %v, want a *LimitError naming %s", err, tt.limit)
			case tt.limit == "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
			if peak > heapBound {
				t.Errorf("the heap rose by %d MiB, want at most %d MiB", peak>>20, heapBound>>20)
			}
			// The agent was cut off soon after the bound: within the
			// windows it was granted.
			if sent := a.sent.Load(); sent > 16<<20 {
				t.Errorf("the agent sent %d MiB before the client stopped it", sent>>20)
			}
		})
	}
}

// TestReadDirDefaultBound is the finding as it was met, with the default
// limits: one endless entry, which took the host's heap to 8 GB, and a
// listing larger than DefaultMaxDirBytes.
func TestReadDirDefaultBound(t *testing.T) {
	mib := bytes.Repeat([]byte("a"), 1<<20)
	entry := append(protocol.Encode(&protocol.FileInfo{Name: strings.Repeat("n", 4<<10), Mode: 0o100644}), '\n')
	tests := []struct {
		name    string
		listing func(s *rogueStream, _ string)
		want    string
		heap    uint64
	}{{
		name: "one endless entry",
		listing: func(s *rogueStream, _ string) {
			if s.data(protocol.ChanOut, []byte(`{"name":"`), protocol.MaxChunk) == nil {
				s.flood(protocol.ChanOut, mib, protocol.MaxChunk, 4*DefaultMaxDirBytes)
			}
		},
		want: "a directory entry over",
		heap: heapBound,
	}, {
		name: "entries of 4 KiB",
		listing: func(s *rogueStream, _ string) {
			s.flood(protocol.ChanOut, entry, protocol.MaxChunk, 4*DefaultMaxDirBytes)
		},
		want: "AgentLimits.MaxDirBytes",
		// The entries decoded, as large as their JSON, and the slice
		// holding them while it doubles.
		heap: 2 * DefaultMaxDirBytes,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startRogue(t, &rogueAgent{serve: rogueDir(tt.listing)})
			var err error
			peak := heapPeak(func() { _, err = c.ReadDir(testContext(t), "/d") })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
			if peak > tt.heap {
				t.Errorf("the heap rose by %d MiB, want at most %d MiB", peak>>20, tt.heap>>20)
			}
		})
	}
}

// TestWalkDirPathBound has every guest directory hold one directory: the
// walk ends where a path gets longer than a guest path can be.
func TestWalkDirPathBound(t *testing.T) {
	a := &rogueAgent{serve: rogueDir(func(s *rogueStream, _ string) {
		s.data(protocol.ChanOut, entries("d", 1), protocol.MaxChunk)
	})}
	c := startRogue(t, a)
	depth := 0
	err := c.WalkDir(testContext(t), "/d", func(_ string, d fs.DirEntry, err error) error {
		if err == nil {
			depth++
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("longer than %d bytes", protocol.MaxPath)) {
		t.Fatalf("err = %v, want a path over %d bytes", err, protocol.MaxPath)
	}
	if depth > protocol.MaxPath/len("/d0")+1 {
		t.Errorf("walked %d levels", depth)
	}
}

// TestWalkDir walks a real tree: every entry once, in lexical order, and
// SkipDir skips a directory.
func TestWalkDir(t *testing.T) {
	c, _ := newTestClient(t, nil)
	dir := t.TempDir()
	for _, p := range []string{"b/x", "a/y/z", "skip/w"} {
		mustT(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755))
		mustT(t, os.WriteFile(filepath.Join(dir, p), nil, 0o644))
	}
	mustT(t, os.Symlink("a", filepath.Join(dir, "link")))
	var got []string
	err := c.WalkDir(testContext(t), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got = append(got, fmt.Sprintf("%s %v", rel, d.Type()))
		if d.Name() == "skip" {
			return fs.SkipDir
		}
		return nil
	})
	mustT(t, err)
	want := ". d---------|a d---------|a/y d---------|a/y/z ----------|b d---------|b/x ----------|link L---------|skip d---------"
	if strings.Join(got, "|") != want {
		t.Errorf("walked %q\nwant      %q", strings.Join(got, "|"), want)
	}
}

// TestAgentControlFrames has a hostile agent send control frames (hello,
// replies) as large as a frame may be: the client refuses them before it
// decodes or queues them.
func TestAgentControlFrames(t *testing.T) {
	// A hello whose mounts list would decode into 1.4 million structs.
	hugeHello := []byte(`{"version":1,"min_version":1,"max_version":1,"mounts":[{}`)
	hugeHello = append(hugeHello, bytes.Repeat([]byte(",{}"), (protocol.MaxBody-len(hugeHello)-2)/3)...)
	hugeHello = append(hugeHello, "]}"...)
	bigReply := append(append([]byte(`{"name":"`), bytes.Repeat([]byte("a"), protocol.MaxBody-20)...), `"}`...)
	tests := []struct {
		name string
		a    *rogueAgent
		call func(ctx context.Context, c *Client) error
	}{{
		name: "a hello of the largest frame",
		a:    &rogueAgent{hello: hugeHello},
		call: func(ctx context.Context, c *Client) error {
			_, err := c.Ping(ctx)
			return err
		},
	}, {
		// A file read whose stream gets 15 more replies, queued for a
		// reader that never asks for them.
		name: "replies queued on a file read",
		a: &rogueAgent{serve: func(s *rogueStream) {
			if s.req.Type != protocol.TypeReadFile {
				return
			}
			s.reply(protocol.TypeReply, 0, protocol.Encode(&protocol.FileInfo{Name: "f", Size: 1, Mode: 0o100644}))
			for range maxQueued - 1 {
				s.reply(protocol.TypeReply, 0, bigReply)
			}
			s.data(protocol.ChanOut, []byte("x"), 1)
		}},
		call: func(ctx context.Context, c *Client) error {
			f, err := c.Open(ctx, "/f")
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.ReadAll(f)
			return err
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startRogue(t, tt.a)
			var err error
			peak := heapPeak(func() { err = tt.call(testContext(t), c) })
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), fmt.Sprintf("over the %d bytes", maxControlBody)) {
				t.Errorf("err = %v, want a protocol error naming the bound", err)
			}
			if peak > heapBound {
				t.Errorf("the heap rose by %d MiB, want at most %d MiB", peak>>20, heapBound>>20)
			}
		})
	}
}

// TestAgentTinyFrames has a hostile agent fill a file read's window with
// 1-byte frames that nobody reads: what the client keeps is about the
// window, not 24 times it (a slice header for each byte).
func TestAgentTinyFrames(t *testing.T) {
	full := make(chan struct{})
	a := &rogueAgent{serve: func(s *rogueStream) {
		if s.req.Type != protocol.TypeReadFile {
			return
		}
		s.reply(protocol.TypeReply, 0, protocol.Encode(&protocol.FileInfo{Name: "f", Size: fileWindow, Mode: 0o100644}))
		s.data(protocol.ChanOut, bytes.Repeat([]byte("x"), fileWindow), 1)
		s.reply(protocol.TypeReply, 0, nil)
		close(full)
		s.waitStopped()
	}}
	c := startRogue(t, a)
	ctx := testContext(t)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := c.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	select {
	case <-full:
	case <-ctx.Done():
		t.Fatal("the agent never filled the window")
	}
	// The frames are in once the reply sent after them is queued.
	poll.Until(t, "the client to take the frames in", 30*time.Second, func() bool {
		f.st.mu.Lock()
		defer f.st.mu.Unlock()
		return len(f.st.queue) > 0
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > 2*fileWindow {
		t.Errorf("the client holds %d MiB for a %d MiB window of 1-byte frames, want at most %d MiB", held>>20, fileWindow>>20, 2*fileWindow>>20)
	}
}
