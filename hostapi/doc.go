// Package hostapi is the krunbox Go SDK: it creates sandboxes (libkrun
// microVMs booted from OCI images), runs commands in them, reads and writes
// their files, and stops them.
//
// A [Host] manages the sandboxes of one state directory and the image cache
// they are made from ([NewHost]; KRUNBOX_HOME or the XDG directories).
// [Host.Create] makes a [Sandbox] from a [Config]: its root file system is a
// writable layer over the cached image, so nothing is copied, or, where the
// host cannot mount that overlay, the sandbox's own copy of the image,
// cloned where the file system can ([RootKind]); a workspace is shared live
// at the same absolute path. [Sandbox.Start] boots its VM
// and returns once the guest agent answers, [Sandbox.Client] talks to that
// agent ([Client.Run], [Client.Start], file operations, [Client.CopyIn],
// [Client.CopyOut]), [Sandbox.Stop] and [Sandbox.Remove] end it.
// [Sandbox.Status] and [Sandbox.CheckReady] say what state it is in and
// why. Sandboxes are named and persist: [Host.Get] finds one again from
// any process. [Host.Preflight] says, before anything is pulled, whether
// this host can start VMs at all.
//
// A program importing this package is its own VM runner (see package vmm):
// no separate binary, no line to add to main.
package hostapi
