// Package hostapi is the krunbox Go SDK: it creates sandboxes (libkrun
// microVMs booted from OCI images), runs commands in them, reads and writes
// their files, and stops them.
//
// [Run] runs one command in a fresh sandbox and removes it: the common
// case in one call. For more, a [Host], the one entry point, manages the
// sandboxes of one state directory and the image cache they are made from
// ([NewHost]; KRUNBOX_HOME or the XDG directories).
// [Host.Create] makes a [Sandbox] from a [Config]: its root file system is a
// writable layer over the cached image, so nothing is copied, or, where the
// host cannot mount that overlay, the sandbox's own copy of the image,
// cloned where the file system can ([RootKind]); a workspace is shared live
// at the same absolute path. [Sandbox.Start] boots its VM
// and returns once the guest agent answers, [Sandbox.Client] talks to that
// agent ([Client.Run], [Client.Start], file operations, [Client.CopyIn],
// [Client.CopyOut]), [Sandbox.Stop] and [Sandbox.Remove] end it.
// [Sandbox.Status] and [Sandbox.CheckReady] say what state it is in and
// why; a call of its Client while its VM does not run fails with an error
// matching [ErrNotRunning]. [Client.Run] returns a [RunResult] for a
// command that ran, whatever its exit status, and an error only for one
// that did not run. Sandboxes are named and persist: [Host.Get] finds one again from
// any process. [Host.Preflight] says, before anything is pulled, whether
// this host can start VMs at all.
//
// A program importing this package is its own VM runner (see package vmm):
// no separate binary, no line to add to main.
//
// # What the guest, an image and a repository control
//
// The guest is hostile, and so are images and cloned repositories. These
// host paths hold what they shape, and the code here touches them only
// through package internal/confine (names resolved below a directory
// handle, no symlink followed out, files opened without blocking, reads
// bounded) or by descriptor:
//
//   - the sandbox's root: its writable layer (<state>/sandboxes/NAME/upper)
//     or its copy of the image (rootfs), written by the guest. The host
//     writes /.krunbox there at each start, replacing whatever the image or
//     the guest put in its place, and removes the whole tree at Remove
//     (never following a link out of it);
//   - every share, the workspace first, written live by the guest: at each
//     start each share is checked again as at Create and opened with no
//     symlink on its way, and that descriptor is what the VM gets; the git
//     files that the host's git runs or obeys (hooks, config, a .git file,
//     the git directories themselves) are mounted read-only or pinned under
//     the share, or fingerprinted where the runner has no mount namespace;
//     the workspace's .git file and git's records outside it are read
//     bounded, without following links;
//   - host trees that CopyIn reads and CopyOut fills, which may lie in a
//     share: walked by descriptor, links copied as links, never followed;
//   - the console log (<state>/sandboxes/NAME/console.log), whose content
//     and size the guest decides: only its tail is read;
//   - the image's flattened tree (package oci): extracted with
//     openat2(RESOLVE_IN_ROOT), set-id bits dropped on export.
//
// Everything the guest agent sends back (frames, sizes, names, paths) is
// bounded and checked by [Client].
package hostapi
