module github.com/krunbox/krunbox

go 1.26.0

require (
	github.com/creack/pty v1.1.24
	github.com/mdlayher/vsock v1.4.0
	github.com/spf13/cobra v1.10.2
	golang.org/x/sys v0.50.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mdlayher/socket v0.8.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
