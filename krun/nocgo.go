//go:build !cgo || !(linux || darwin)

package krun

func open(string) (backend, error) { return nil, ErrNoCgo }

func preload(string) error { return ErrNoCgo }

func krunfwVersion(string) (string, int, error) { return "", 0, ErrNoCgo }
