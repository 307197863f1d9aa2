package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{Header: Header{Stream: 0, Type: TypeHello}, Body: []byte(`{}`)},
		{Header: Header{Stream: 7, Type: TypeData, Channel: ChanErr}, Body: bytes.Repeat([]byte{1}, MaxChunk)},
		{Header: Header{Stream: 1<<32 - 1, Type: TypeEOF, Flags: FlagEnd, Channel: ChanOut}},
	}
	var wire []byte
	for _, f := range frames {
		wire = AppendFrame(wire, f.Header, f.Body)
	}
	r := bytes.NewReader(wire)
	for _, want := range frames {
		got, err := ReadFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		want.Length = uint32(len(want.Body))
		if got.Header != want.Header || !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("read %+v, want %+v", got.Header, want.Header)
		}
	}
	if _, err := ReadFrame(r); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	good := AppendFrame(nil, Header{Stream: 1, Type: TypePing}, []byte("body"))
	huge := make([]byte, HeaderSize)
	binary.BigEndian.PutUint32(huge, MaxBody+1)
	for _, tt := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"empty", nil, io.EOF},
		{"cut header", good[:7], io.ErrUnexpectedEOF},
		{"cut body", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"oversize", huge, ErrFrameTooLarge},
	} {
		if _, err := ReadFrame(bytes.NewReader(tt.input)); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	maxOK := make([]byte, HeaderSize)
	binary.BigEndian.PutUint32(maxOK, MaxBody)
	if _, err := ParseHeader(maxOK); err != nil {
		t.Errorf("a body of exactly MaxBody refused: %v", err)
	}
}

func TestTypeVersions(t *testing.T) {
	if TypeExec.Since() != 1 || Type(200).Since() != 0 {
		t.Error("Since: every version-1 type is 1, unknown types 0")
	}
	if TypeFileEvents.Since() != 2 || Version < 2 || !TypeFileEvents.IsRequest() {
		t.Error("file events are a request of version 2")
	}
	if !TypeExec.IsRequest() || TypeData.IsRequest() || TypeSignal.IsRequest() {
		t.Error("IsRequest: only types that open a stream")
	}
	if Type(200).String() != "type(200)" || TypeReadFile.String() != "read-file" {
		t.Error("String")
	}
}

func TestFileEventsStatusString(t *testing.T) {
	for _, tt := range []struct {
		s    *FileEventsStatus
		want string
	}{
		{nil, "not delivered: the guest agent predates file events"},
		{&FileEventsStatus{Reason: ErrNoFileEvents.Error()}, "not delivered: the guest kernel has no fsnotify injection (a stock libkrunfw)"},
		{&FileEventsStatus{Delivered: true, Reason: "fanotify: EPERM"}, "delivered (the guest's own changes may be reported twice: fanotify: EPERM)"},
		{&FileEventsStatus{Delivered: true, Filtered: true}, "delivered"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestDecodeMalformedVersusInvalid(t *testing.T) {
	var r ExecRequest
	if err := Decode([]byte(`{"argv":`), &r); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated JSON: %v, want ErrMalformed", err)
	}
	if err := Decode([]byte(`{"argv":[]}`), &r); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty argv: %v, want ErrInvalid", err)
	}
	if err := Decode([]byte(`{"argv":["ls"],"future_field":{"x":1}}`), &r); err != nil {
		t.Errorf("unknown fields must be ignored: %v", err)
	}
}

func TestCredit(t *testing.T) {
	if n, err := DecodeCredit(EncodeCredit(12345)); err != nil || n != 12345 {
		t.Fatalf("round trip: %d, %v", n, err)
	}
	for _, b := range [][]byte{nil, {0, 0, 0}, EncodeCredit(0), EncodeCredit(MaxWindow + 1)} {
		if _, err := DecodeCredit(b); err == nil {
			t.Errorf("DecodeCredit(%x) accepted", b)
		}
	}
}

func TestConfigFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "agent.json")
	want := &Config{
		Hostname: "box", Mounts: []Mount{{Tag: "kb0", Path: "/work", ReadOnly: true}},
		Env: []string{"A=1"}, User: "1000:1000", Workdir: "/work", IdleTimeout: time.Minute,
	}
	if err := WriteConfig(name, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hostname != "box" || len(got.Mounts) != 1 || got.Mounts[0] != want.Mounts[0] || got.IdleTimeout != time.Minute || got.ListenPort() != DefaultPort {
		t.Errorf("read back %+v", got)
	}
	os.WriteFile(name, []byte(`{"port": 7, "from_the_future": [1,2]}`), 0o644)
	if got, err := ReadConfig(name); err != nil || got.ListenPort() != 7 {
		t.Errorf("unknown fields: %+v, %v", got, err)
	}
	for _, bad := range []string{
		`{"mounts":[{"tag":"","path":"/x"}]}`,
		`{"mounts":[{"tag":"t","path":"relative"}]}`,
		`{"env":["NOEQ"]}`,
		`{"env":["=v"]}`,
		`{"env":["A=b\u0000c"]}`,
		`{"user":"me\u0000"}`,
		`{"workdir":"rel"}`,
		`{"idle_timeout_ns":-1}`,
		`{"port":`,
	} {
		os.WriteFile(name, []byte(bad), 0o644)
		if _, err := ReadConfig(name); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("config %s: %v, want an error naming the file", bad, err)
		}
	}
	if err := WriteConfig(name, &Config{Workdir: "rel"}); err == nil {
		t.Error("WriteConfig wrote an invalid config")
	}
}

func TestSendWindow(t *testing.T) {
	w := NewSendWindow(10)
	done := make(chan struct{})
	if n, err := w.Take(done, 4); n != 4 || err != nil {
		t.Fatalf("Take = %d, %v", n, err)
	}
	if n, _ := w.Take(done, 100); n != 6 {
		t.Fatalf("Take beyond the credit = %d, want the 6 left", n)
	}
	got := make(chan int)
	go func() {
		n, _ := w.Take(done, 100)
		got <- n
	}()
	select {
	case n := <-got:
		t.Fatalf("Take without credit returned %d", n)
	case <-time.After(20 * time.Millisecond):
	}
	w.Add(3)
	if n := <-got; n != 3 {
		t.Fatalf("after Add(3): %d", n)
	}
	go func() { close(done) }()
	if _, err := w.Take(done, 1); err == nil {
		t.Fatal("Take after done returned no error")
	}
	w.Close(io.ErrClosedPipe)
	if _, err := w.Take(make(chan struct{}), 1); err != io.ErrClosedPipe {
		t.Fatalf("Take after Close: %v", err)
	}
}

func TestInbox(t *testing.T) {
	var mu sync.Mutex
	var granted uint32
	in := NewInbox(8, func(n uint32) { mu.Lock(); granted += n; mu.Unlock() })
	if err := in.Push([]byte("abcdef")); err != nil {
		t.Fatal(err)
	}
	if err := in.Push([]byte("ghi")); err == nil {
		t.Fatal("push over the window accepted")
	}
	buf := make([]byte, 4)
	n, _ := in.Read(buf)
	if string(buf[:n]) != "abcd" {
		t.Fatalf("read %q", buf[:n])
	}
	mu.Lock()
	g := granted
	mu.Unlock()
	if g != 4 {
		t.Fatalf("granted %d after reading 4 of a window of 8, want 4", g)
	}
	// The granted bytes may now be sent.
	if err := in.Push([]byte("ghij")); err != nil {
		t.Fatalf("push within the renewed credit: %v", err)
	}
	in.CloseEOF()
	rest, err := io.ReadAll(in)
	if err != nil || string(rest) != "efghij" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if err := in.Push([]byte("x")); err == nil {
		t.Fatal("data after EOF accepted")
	}
}

// TestInboxTinyChunks pushes many tiny chunks, and pooled ones, while a
// reader holds one: they are read back whole and in order, and kept in at
// most maxChunks chunks.
func TestInboxTinyChunks(t *testing.T) {
	in := NewInbox(8<<20, func(uint32) {})
	var want bytes.Buffer
	push := func(b []byte) {
		t.Helper()
		want.Write(b)
		if err := in.Push(b); err != nil {
			t.Fatal(err)
		}
	}
	push([]byte("head"))
	first := make([]byte, 2)
	if _, err := in.Read(first); err != nil { // the head chunk is read from
		t.Fatal(err)
	}
	for i := range 3 * maxChunks {
		push([]byte{byte('a' + i%26)})
		if i%100 == 0 {
			pooled := GetBuffer()[:MaxChunk/2+1]
			for j := range pooled {
				pooled[j] = byte(i + j)
			}
			push(pooled)
		}
	}
	in.mu.Lock()
	n := len(in.chunks)
	in.mu.Unlock()
	if n > maxChunks {
		t.Errorf("%d chunks kept, want at most %d", n, maxChunks)
	}
	in.CloseEOF()
	rest, err := io.ReadAll(in)
	if err != nil || !bytes.Equal(append(first, rest...), want.Bytes()) {
		t.Fatalf("read back %d bytes (%v), want the %d pushed, in order", len(first)+len(rest), err, want.Len())
	}
}

func TestInboxClose(t *testing.T) {
	in := NewInbox(100, func(uint32) {})
	in.Push([]byte("data"))
	in.CloseWithError(io.ErrUnexpectedEOF, false)
	if b, err := io.ReadAll(in); string(b) != "data" || err != io.ErrUnexpectedEOF {
		t.Fatalf("after CloseWithError: %q, %v", b, err)
	}
	in = NewInbox(100, func(uint32) {})
	in.Push([]byte("data"))
	in.CloseEOF()
	in.CloseWithError(io.ErrClosedPipe, true)
	if b, err := io.ReadAll(in); len(b) != 0 || err != io.ErrClosedPipe {
		t.Fatalf("abandoned after EOF: %q, %v; want the abort to win", b, err)
	}
	var w bytes.Buffer
	in = NewInbox(100, func(uint32) {})
	in.Push([]byte("ab"))
	in.Push([]byte("cd"))
	in.CloseEOF()
	if n, err := in.WriteTo(&w); n != 4 || err != nil || w.String() != "abcd" {
		t.Fatalf("WriteTo = %d, %v, %q", n, err, w.String())
	}
}

func TestMergeEnv(t *testing.T) {
	got := MergeEnv([]string{"PATH=/bin", "HOME=/"}, []string{"A=1", "HOME=/root"}, []string{"A=2", "B=x=y"})
	want := []string{"PATH=/bin", "HOME=/root", "A=2", "B=x=y"}
	if !slices.Equal(got, want) {
		t.Fatalf("MergeEnv = %v, want %v", got, want)
	}
}
