// Package hostapi is the krunbox Go SDK: it creates sandboxes (libkrun
// microVMs booted from OCI images), runs commands in them, reads and writes
// their files, and stops them.
package hostapi
