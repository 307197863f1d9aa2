package main

import (
	"errors"

	"github.com/krunbox/krunbox/hostapi"
)

// createHint adds advice to the errors of creating a sandbox.
func createHint(err error, name string) error {
	switch {
	case errors.Is(err, hostapi.ErrExists):
		return withHint(err, "choose another --name, or remove the sandbox with 'krunbox rm "+name+"'")
	case errors.Is(err, hostapi.ErrInvalidMount):
		return withHint(err, "-v takes HOST[:GUEST][:ro]: HOST an existing directory, GUEST an absolute path outside /proc, /sys, /dev and /.krunbox")
	}
	return err
}
