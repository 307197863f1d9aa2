//go:build !linux

package flatten

import (
	"context"
	"io"
)

// Applier applies layers to one root directory. On this system every
// method fails with ErrUnsupported.
type Applier struct{}

// NewApplier returns ErrUnsupported on this system.
func NewApplier(string, Options) (*Applier, error) { return nil, ErrUnsupported }

// ApplyLayer returns ErrUnsupported on this system.
func (a *Applier) ApplyLayer(context.Context, io.Reader) error { return ErrUnsupported }

// Stats returns zero on this system.
func (a *Applier) Stats() Stats { return Stats{} }

// Close does nothing on this system.
func (a *Applier) Close() error { return nil }
