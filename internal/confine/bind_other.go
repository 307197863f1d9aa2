//go:build !linux

package confine

import (
	"errors"
	"io/fs"
)

// BindOver needs Linux's mount namespaces; elsewhere it fails.
func BindOver(p string, readOnly bool) error {
	return &fs.PathError{Op: "bind", Path: p, Err: errors.New("bind mounts need Linux")}
}
