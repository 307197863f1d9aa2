// Package guestagent is the krunbox agent that runs inside the VM: it serves
// exec, file and health requests from the host over vsock.
package guestagent
