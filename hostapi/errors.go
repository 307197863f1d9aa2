package hostapi

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// ErrUnknownUser is the cause of a StartError for a user or group that is
// not in the guest's /etc/passwd or /etc/group.
var ErrUnknownUser = errors.New("unknown user or group")

// RemoteError is an error the agent reported. Its Err is the errno or
// sentinel it maps to on this host, so errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, syscall.ENOTDIR) work as they do for local files.
type RemoteError struct {
	// Code is the agent's error code: an errno name such as "ENOENT", or
	// one of protocol's Code constants.
	Code string
	// Op and Path are what failed, as the agent saw it.
	Op, Path string
	// Message describes the error.
	Message string
	// Err is the errno (or ErrUnknownUser, context.Canceled) Code maps to,
	// or nil.
	Err error
}

func (e *RemoteError) Error() string {
	pe := protocol.Error{Code: e.Code, Op: e.Op, Path: e.Path, Message: e.Message}
	return "guest: " + pe.Error()
}

func (e *RemoteError) Unwrap() error { return e.Err }

// remoteError decodes an Error frame's body.
func remoteError(body []byte) error {
	var pe protocol.Error
	if err := protocol.Decode(body, &pe); err != nil {
		return &ProtocolError{Msg: err.Error()}
	}
	e := &RemoteError{Code: pe.Code, Op: pe.Op, Path: pe.Path, Message: pe.Message}
	switch pe.Code {
	case protocol.CodeUnknownUser:
		e.Err = ErrUnknownUser
	case protocol.CodeProtocol:
		return &ProtocolError{Remote: true, Msg: pe.Message}
	default:
		if errno, ok := errnoNames()[pe.Code]; ok {
			e.Err = errno
		}
	}
	return e
}

// pathError turns an agent error into an *fs.PathError like the os
// package returns, when the agent gave an errno.
func pathError(op, path string, err error) error {
	var re *RemoteError
	if errors.As(err, &re) {
		var errno syscall.Errno
		if errors.As(re.Err, &errno) {
			return &fs.PathError{Op: op, Path: path, Err: errno}
		}
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// linkError is pathError for operations on two paths, like os.Rename.
func linkError(op, oldpath, newpath string, err error) error {
	var pe *fs.PathError
	if errors.As(pathError(op, oldpath, err), &pe) {
		err = pe.Err
	}
	return &os.LinkError{Op: op, Old: oldpath, New: newpath, Err: err}
}

var errnoNames = sync.OnceValue(func() map[string]syscall.Errno {
	m := make(map[string]syscall.Errno)
	for e := syscall.Errno(1); e < 256; e++ {
		if name := unix.ErrnoName(e); name != "" {
			m[name] = e
		}
	}
	return m
})
