package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Version is the newest protocol version this package speaks, and
// MinVersion the oldest. A host and an agent use the highest version both
// speak; see Hello.
const (
	Version    = 2
	MinVersion = 1
)

// HeaderSize is the size of the fixed frame header.
const HeaderSize = 12

// MaxBody is the largest frame body either side accepts. A longer length in
// a header is a protocol error: the receiver closes the connection.
const MaxBody = 4 << 20

// MaxChunk is the largest data chunk a sender puts in one Data frame.
// Anything larger is streamed in several frames.
const MaxChunk = 1 << 20

// DefaultWindow is the credit each side grants the other on every data
// channel of a new stream, unless the hello says otherwise.
const DefaultWindow = 1 << 20

// Type says what a frame carries.
type Type uint8

// Frame types. Types below 16 are the framing layer, shared by every kind of
// stream; the others are requests (sent by the host to open a stream) and
// their replies. See the package documentation for who sends what.
const (
	TypeHello      Type = 1 // host → agent, stream 0: versions and window
	TypeHelloReply Type = 2 // agent → host, stream 0: version chosen, agent facts
	TypeError      Type = 3 // agent → host: the request failed; on stream 0, the connection is closing
	TypeReply      Type = 4 // agent → host: a request's JSON result
	TypeData       Type = 5 // both: raw bytes on a channel, within the peer's credit
	TypeEOF        Type = 6 // both: no more data on a channel
	TypeCredit     Type = 7 // both: the receiver of a channel grants more bytes (4-byte body)
	TypeCancel     Type = 8 // host → agent: abandon the stream (kills an exec's process group)

	TypePing     Type = 16 // host → agent: answered by an empty Reply
	TypeHealth   Type = 17 // host → agent: answered by Reply{Health}
	TypeShutdown Type = 18 // host → agent: terminate processes, sync, exit

	TypeExec        Type = 32 // host → agent: ExecRequest
	TypeSignal      Type = 33 // host → agent on an exec stream: SignalRequest
	TypeResize      Type = 34 // host → agent on an exec stream: WindowSize
	TypeExecStarted Type = 35 // agent → host: ExecStarted
	TypeExecExit    Type = 36 // agent → host, last frame of an exec stream: ExecExit

	TypeReadFile  Type = 48 // host → agent: ReadFileRequest; Reply{FileInfo}, then data
	TypeWriteFile Type = 49 // host → agent: WriteFileRequest, then data; Reply{WriteFileResult}
	TypeStat      Type = 50 // host → agent: StatRequest; Reply{FileInfo}
	TypeReadDir   Type = 51 // host → agent: PathRequest; data: JSON lines of FileInfo
	TypeMkdir     Type = 52 // host → agent: MkdirRequest
	TypeRemove    Type = 53 // host → agent: RemoveRequest
	TypeRename    Type = 54 // host → agent: RenameRequest
	TypeSymlink   Type = 55 // host → agent: SymlinkRequest
	TypeReadlink  Type = 56 // host → agent: PathRequest; Reply{ReadlinkResult}
	TypeChmod     Type = 57 // host → agent: ChmodRequest

	TypeFileEvents Type = 64 // host → agent (version 2): FileEventsRequest; Reply{FileEventsResult}
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeHelloReply: "hello-reply", TypeError: "error", TypeReply: "reply",
	TypeData: "data", TypeEOF: "eof", TypeCredit: "credit", TypeCancel: "cancel",
	TypePing: "ping", TypeHealth: "health", TypeShutdown: "shutdown",
	TypeExec: "exec", TypeSignal: "signal", TypeResize: "resize",
	TypeExecStarted: "exec-started", TypeExecExit: "exec-exit",
	TypeReadFile: "read-file", TypeWriteFile: "write-file", TypeStat: "stat",
	TypeReadDir: "read-dir", TypeMkdir: "mkdir", TypeRemove: "remove", TypeRename: "rename",
	TypeSymlink: "symlink", TypeReadlink: "readlink", TypeChmod: "chmod",
	TypeFileEvents: "file-events",
}

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Since returns the protocol version that introduced t, or 0 for a type no
// version defines. A sender never sends a type newer than the negotiated
// version; a receiver treats one as a protocol error.
func (t Type) Since() int {
	switch _, ok := typeNames[t]; {
	case t == TypeFileEvents:
		return 2
	case ok:
		return 1
	}
	return 0
}

// IsRequest reports whether t opens a new stream.
func (t Type) IsRequest() bool {
	switch t {
	case TypePing, TypeHealth, TypeShutdown, TypeExec, TypeReadFile, TypeWriteFile,
		TypeStat, TypeReadDir, TypeMkdir, TypeRemove, TypeRename, TypeSymlink,
		TypeReadlink, TypeChmod, TypeFileEvents:
		return true
	}
	return false
}

// Flags modify a frame.
type Flags uint8

// FlagEnd marks the last frame the agent sends on a stream: after it, the
// stream is closed and its id is never used again.
const FlagEnd Flags = 1

// Channel numbers a byte stream inside a stream.
type Channel uint8

// Channels. For exec, In is stdin, Out is stdout (or the terminal), Err is
// stderr. For files, Out carries what is read and In what is written.
const (
	ChanIn  Channel = 0
	ChanOut Channel = 1
	ChanErr Channel = 2
)

func (c Channel) String() string {
	switch c {
	case ChanIn:
		return "stdin"
	case ChanOut:
		return "stdout"
	case ChanErr:
		return "stderr"
	}
	return fmt.Sprintf("channel(%d)", uint8(c))
}

// Header is the fixed part of a frame:
//
//	offset  size  field
//	0       4     body length, big endian, at most MaxBody
//	4       4     stream id, big endian (0 is the connection itself)
//	8       1     type
//	9       1     flags
//	10      1     channel (Data, EOF and Credit frames; 0 otherwise)
//	11      1     reserved: sent as 0, ignored on receipt
type Header struct {
	Length  uint32
	Stream  uint32
	Type    Type
	Flags   Flags
	Channel Channel
}

// Put encodes h into b[:HeaderSize].
func (h Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint32(b[0:4], h.Length)
	binary.BigEndian.PutUint32(b[4:8], h.Stream)
	b[8] = byte(h.Type)
	b[9] = byte(h.Flags)
	b[10] = byte(h.Channel)
	b[11] = 0
}

// ErrFrameTooLarge is returned for a header announcing a body over MaxBody.
var ErrFrameTooLarge = errors.New("frame body over the limit")

// ParseHeader decodes a header from b[:HeaderSize] and checks its length.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, io.ErrUnexpectedEOF
	}
	h := Header{
		Length:  binary.BigEndian.Uint32(b[0:4]),
		Stream:  binary.BigEndian.Uint32(b[4:8]),
		Type:    Type(b[8]),
		Flags:   Flags(b[9]),
		Channel: Channel(b[10]),
	}
	if h.Length > MaxBody {
		return h, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, h.Length, MaxBody)
	}
	return h, nil
}

// Frame is a decoded frame. Body is owned by whoever received it; a Data
// body may come from the buffer pool (see PutBuffer).
type Frame struct {
	Header
	Body []byte
}

// ReadFrame reads one frame from r. It returns io.EOF only when r ends
// cleanly between frames; a frame cut short gives io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader) (Frame, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Frame{}, err
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Header: h}
	if h.Length > 0 {
		if h.Type == TypeData && h.Length > MaxChunk/2 && h.Length <= MaxChunk {
			f.Body = GetBuffer()[:h.Length]
		} else {
			f.Body = make([]byte, h.Length)
		}
		if _, err := io.ReadFull(r, f.Body); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	return f, nil
}

// AppendFrame appends the encoding of a frame with header h (its Length set
// from body) and body to b.
func AppendFrame(b []byte, h Header, body []byte) []byte {
	h.Length = uint32(len(body))
	var hb [HeaderSize]byte
	h.Put(hb[:])
	return append(append(b, hb[:]...), body...)
}

// EncodeCredit is the body of a Credit frame granting n bytes.
func EncodeCredit(n uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, n)
}

// DecodeCredit decodes the body of a Credit frame.
func DecodeCredit(body []byte) (uint32, error) {
	if len(body) != 4 {
		return 0, fmt.Errorf("credit frame body of %d bytes, want 4", len(body))
	}
	n := binary.BigEndian.Uint32(body)
	if n == 0 || n > MaxWindow {
		return 0, fmt.Errorf("credit of %d bytes out of range", n)
	}
	return n, nil
}

// MaxWindow bounds the credit a receiver may grant on one channel, so that
// a sender's window cannot overflow.
const MaxWindow = 1 << 30

// bufferSize is the capacity of pooled buffers: a header and a chunk.
const bufferSize = HeaderSize + MaxChunk

var buffers = sync.Pool{New: func() any { b := make([]byte, bufferSize); return &b }}

// GetBuffer returns a buffer of HeaderSize+MaxChunk bytes from a pool, for
// Data frames: ReadFrame reads their bodies into one, senders can build a
// frame in one without copying.
func GetBuffer() []byte { return (*buffers.Get().(*[]byte))[:bufferSize] }

// PutBuffer returns a buffer (or a slice of one from its start) to the
// pool once nothing refers to it; other slices are left to the collector.
func PutBuffer(b []byte) {
	if cap(b) == bufferSize {
		b = b[:bufferSize]
		buffers.Put(&b)
	}
}
