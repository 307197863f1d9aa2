// Package krun binds the libkrun C API. The library is loaded with dlopen at
// run time, so building krunbox does not need libkrun installed.
package krun
