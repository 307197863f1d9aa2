package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets for everything that decodes input from the other side: the
// frame reader and each message decoder. Their seeds are committed under
// testdata/fuzz; KRUNBOX_WRITE_FUZZ_CORPUS=1 go test -run TestWriteFuzzCorpus
// rewrites them from fuzzSeeds.

// fuzzSeeds are the seed inputs of each fuzz target.
var fuzzSeeds = map[string][]string{
	"FuzzReadFrame": {
		string(AppendFrame(nil, Header{Type: TypeHello}, Encode(&Hello{MinVersion: 1, MaxVersion: 1}))),
		string(AppendFrame(AppendFrame(nil, Header{Stream: 1, Type: TypePing}, nil), Header{Stream: 1, Type: TypeData, Channel: ChanIn}, []byte("stdin"))),
		string(AppendFrame(nil, Header{Stream: 3, Type: TypeCredit, Channel: ChanOut}, EncodeCredit(65536))),
		"\xff\xff\xff\xff\x00\x00\x00\x01\x10\x00\x00\x00",
		"\x00\x00\x00\x10\x00\x00\x00\x01\x05\x00\x00\x00short",
		"\x00\x00\x00",
		"GET / HTTP/1.1\r\n\r\n",
	},
	"FuzzDecodeHello":      {`{"min_version":1,"max_version":1,"client":"x","window":1048576}`, `{}`, `[]`, `{"min_version":"1"}`},
	"FuzzDecodeHelloReply": {string(Encode(&HelloReply{Version: 1, MinVersion: 1, MaxVersion: 1, Mounts: []MountStatus{{Mount: Mount{Tag: "kb0", Path: "/w"}, Error: "x"}}})), `{"version":1,"boot":{"agent_start_ns":-1}}`},
	"FuzzDecodeExec": {
		`{"argv":["sh","-c","echo hi"],"env":["A=1"],"dir":"/tmp","user":"1000:1000","tty":{"rows":24,"cols":80},"stdin":true,"timeout_ns":1000000000}`,
		`{"argv":[]}`, `{"argv":[""]}`, `{"argv":["a\u0000b"]}`, `{"argv":["x"],"env":["NOEQ"]}`, `{"argv":["x"],"tty":{"rows":0,"cols":80}}`,
		`{"argv":["x"],"timeout_ns":-5}`, `{"argv":"sh"}`, `null`, ``,
	},
	"FuzzDecodeSignal":    {`{"signal":"SIGTERM"}`, `{"signal":""}`, `{"signal":17}`},
	"FuzzDecodeResize":    {`{"rows":40,"cols":132}`, `{"rows":0,"cols":1}`, `{"rows":70000}`},
	"FuzzDecodePath":      {`{"path":"/etc/passwd","no_follow":true}`, `{"path":""}`, `{"path":"a\u0000"}`},
	"FuzzDecodeReadFile":  {`{"path":"/f","offset":10,"limit":100}`, `{"path":"/f","offset":-1}`},
	"FuzzDecodeWriteFile": {`{"path":"/f","mode":420,"keep_mode":true,"mkdir_all":true,"sync":true}`, `{"path":"/f","mode":65535}`, `{"path":"/f","append":true,"exclusive":true}`},
	"FuzzDecodeMkdir":     {`{"path":"/d","mode":493,"all":true}`, `{"path":"/d","mode":99999}`},
	"FuzzDecodeRemove":    {`{"path":"/d","all":true}`, `{"path":"/","all":true}`},
	"FuzzDecodeRename":    {`{"old_path":"/a","new_path":"/b"}`, `{"old_path":"/a"}`},
	"FuzzDecodeSymlink":   {`{"target":"../x","new_path":"/l"}`, `{"target":"","new_path":"/l"}`},
	"FuzzDecodeChmod":     {`{"path":"/f","mode":2541}`, `{"path":"/f","mode":4294967295}`},
	"FuzzDecodeShutdown":  {`{"grace_ns":5000000000}`, `{"grace_ns":-1}`, `{}`},
	"FuzzDecodeError":     {`{"code":"ENOENT","op":"open","path":"/x","message":"no such file or directory"}`, `{"code":7}`},
	"FuzzDecodeExecExit":  {`{"code":137,"signal":"SIGKILL","timed_out":true}`, `{"code":-1}`},
	"FuzzDecodeCredit":    {"\x00\x01\x00\x00", "\x00\x00\x00\x00", "\xff\xff\xff\xff", "\x01"},
	"FuzzDecodeFileEvents": {
		`{"events":[{"op":"create","path":"/w/a"},{"op":"move","old_path":"/w/a","path":"/w/b"},{"op":"modify","path":"/w"}]}`,
		`{"events":[]}`, `{"events":[{"op":"modify","path":"/w/../etc"}]}`, `{"events":[{"op":"delete","path":"/wx/a"}]}`,
		`{"events":[{"op":"move","path":"/w/b"}]}`, `{"events":[{"op":"bogus","path":"/w/a"}]}`, `{"events":[{"op":"attrib","path":"w/a"}]}`,
	},
}

func addSeeds(f *testing.F) {
	for _, s := range fuzzSeeds[f.Name()] {
		f.Add([]byte(s))
	}
}

func FuzzReadFrame(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		consumed := 0
		for {
			fr, err := ReadFrame(r)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				if err == io.EOF && consumed != len(data) {
					t.Fatalf("io.EOF with %d of %d bytes consumed", consumed, len(data))
				}
				return
			}
			if int(fr.Length) != len(fr.Body) || fr.Length > MaxBody {
				t.Fatalf("header length %d, body %d", fr.Length, len(fr.Body))
			}
			enc := AppendFrame(nil, fr.Header, fr.Body)
			orig := data[consumed : consumed+len(enc)]
			if !bytes.Equal(enc[:11], orig[:11]) || !bytes.Equal(enc[HeaderSize:], orig[HeaderSize:]) {
				t.Fatalf("re-encoding differs: %x vs %x", enc, orig)
			}
			consumed += len(enc)
		}
	})
}

// fuzzDecode checks that decoding never panics, fails only with
// ErrMalformed or ErrInvalid, and that what it accepts survives a round
// trip.
func fuzzDecode[T any](f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var v T
		err := Decode(body, &v)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error neither malformed nor invalid: %v", err)
			}
			return
		}
		var again T
		if err := Decode(Encode(&v), &again); err != nil {
			t.Fatalf("accepted %q, but not its re-encoding: %v", body, err)
		}
	})
}

func FuzzDecodeHello(f *testing.F)      { fuzzDecode[Hello](f) }
func FuzzDecodeHelloReply(f *testing.F) { fuzzDecode[HelloReply](f) }
func FuzzDecodeExec(f *testing.F)       { fuzzDecode[ExecRequest](f) }
func FuzzDecodeSignal(f *testing.F)     { fuzzDecode[SignalRequest](f) }
func FuzzDecodeResize(f *testing.F)     { fuzzDecode[WindowSize](f) }
func FuzzDecodePath(f *testing.F)       { fuzzDecode[PathRequest](f) }
func FuzzDecodeReadFile(f *testing.F)   { fuzzDecode[ReadFileRequest](f) }
func FuzzDecodeWriteFile(f *testing.F)  { fuzzDecode[WriteFileRequest](f) }
func FuzzDecodeMkdir(f *testing.F)      { fuzzDecode[MkdirRequest](f) }
func FuzzDecodeRemove(f *testing.F)     { fuzzDecode[RemoveRequest](f) }
func FuzzDecodeRename(f *testing.F)     { fuzzDecode[RenameRequest](f) }
func FuzzDecodeSymlink(f *testing.F)    { fuzzDecode[SymlinkRequest](f) }
func FuzzDecodeChmod(f *testing.F)      { fuzzDecode[ChmodRequest](f) }
func FuzzDecodeShutdown(f *testing.F)   { fuzzDecode[ShutdownRequest](f) }
func FuzzDecodeError(f *testing.F)      { fuzzDecode[Error](f) }
func FuzzDecodeExecExit(f *testing.F)   { fuzzDecode[ExecExit](f) }

// FuzzDecodeFileEvents: what Decode accepts is bounded and clean, and
// CheckWithin passes only paths inside the share.
func FuzzDecodeFileEvents(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var r FileEventsRequest
		if err := Decode(body, &r); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error neither malformed nor invalid: %v", err)
			}
			return
		}
		if len(r.Events) == 0 || len(r.Events) > MaxFileEvents {
			t.Fatalf("accepted %d events", len(r.Events))
		}
		if r.CheckWithin([]string{"/w"}) != nil {
			return
		}
		for _, e := range r.Events {
			for _, p := range []string{e.Path, e.OldPath} {
				if p != "" && p != "/w" && !strings.HasPrefix(p, "/w/") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
					t.Fatalf("accepted %q for the share /w", p)
				}
			}
		}
	})
}

func FuzzDecodeCredit(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := DecodeCredit(body)
		if err == nil && (n == 0 || n > MaxWindow || len(body) != 4) {
			t.Fatalf("accepted credit %d from %x", n, body)
		}
	})
}

// TestWriteFuzzCorpus writes fuzzSeeds to testdata/fuzz, in the format of
// go test -fuzz, when KRUNBOX_WRITE_FUZZ_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("KRUNBOX_WRITE_FUZZ_CORPUS") != "1" {
		t.Skip("set KRUNBOX_WRITE_FUZZ_CORPUS=1 to rewrite testdata/fuzz")
	}
	for name, seeds := range fuzzSeeds {
		dir := filepath.Join("testdata", "fuzz", name)
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(s))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
