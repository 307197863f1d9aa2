//go:build !linux

package main

import "errors"

// watch needs inotify: netprobe runs in Linux guests.
func watch([]string) error { return errors.New("watch: Linux only") }
