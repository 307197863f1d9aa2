// Package krun binds the libkrun C API. The library is loaded with dlopen at
// run time, so building krunbox does not need libkrun installed, and a
// missing library is an error from [Open], not a link failure.
//
// The C declarations are the package's own (see libkrun.h of libkrun 1.19).
// Functions that appeared after libkrun 1.8 are looked up with dlsym when
// first used; when a library lacks one, the method reports an
// [*UnsupportedError] (errors.Is(err, ErrUnsupported)). Every failure of a C
// function comes back as an [*Error] naming the function and the errno.
//
// The binding guards against the calls that abort the process instead of
// failing in libkrun: a second logger initialisation, virtio-fs tags over
// 36 bytes, NUL bytes in strings, and NULL environment arrays (which would
// copy the whole host environment onto the guest kernel command line).
//
// [Context.StartEnter] never returns on success: the calling process
// becomes the VM and exits with the guest's exit code. Without KVM it
// aborts the process (SIGABRT), so check /dev/kvm before calling it.
//
// Built without cgo (CGO_ENABLED=0) the package still compiles, and [Open]
// returns [ErrNoCgo].
package krun
