//go:build linux

// Command krunbox-agent is the krunbox guest agent. libkrun's init starts it
// in the VM as /.krunbox/krunbox-agent --config /.krunbox/agent.json; it
// mounts the configured shares, listens on vsock, and serves the host's
// exec, file and health requests until asked to shut down, then exits 0,
// which stops the VM.
//
// Outside a VM (tests, debugging), --listen unix:PATH serves the same
// protocol on a unix socket, and the agent then leaves the hostname and
// mounts alone unless the config sets setup_outside_vm.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/krunbox/krunbox/guestagent"
	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/guestagent/vmdev"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	started := guestagent.BootTime()
	if err := run(os.Args[1:], started); err != nil {
		fmt.Fprintf(os.Stderr, "krunbox-agent: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, started time.Duration) error {
	fl := flag.NewFlagSet("krunbox-agent", flag.ContinueOnError)
	configPath := fl.String("config", protocol.ConfigPath, "boot configuration `file`")
	listen := fl.String("listen", "", "where to listen: vsock:PORT, or unix:PATH outside a VM (default: vsock on the config's port)")
	debug := fl.Bool("debug", false, "log debug messages")
	showVersion := fl.Bool("version", false, "print the version and exit")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version)
		return nil
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("agent", version)

	// The agent serves with the config it was given or not at all: one it
	// cannot use (a bad env entry, a relative path) would leave the guest
	// without its mounts, its user or its idle timeout while the host
	// believed it started as configured. Exiting stops the VM, and the
	// message, on the console, is what the host's start reports.
	cfg, err := protocol.ReadConfig(*configPath)
	if err != nil {
		given := false
		fl.Visit(func(f *flag.Flag) { given = given || f.Name == "config" })
		if given || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		log.Info("no configuration file: using the defaults", "file", *configPath)
		cfg = &protocol.Config{}
	}

	network, address, err := listenAddress(*listen, cfg)
	if err != nil {
		return err
	}
	opts := guestagent.Options{
		Config:  cfg,
		Version: version,
		Started: started,
		Setup:   network == "vsock" || cfg.SetupOutsideVM,
		Sync:    network == "vsock",
		Logger:  log,
		Console: os.Stdout,
	}
	if network == "vsock" {
		opts.FileEvents = vmdev.FsnotifyInjectPath()
	}
	a, err := guestagent.New(opts)
	if err != nil {
		return err
	}
	var l net.Listener
	if network == "unix" {
		os.Remove(address)
		l, err = net.Listen("unix", address)
	} else {
		port, _ := strconv.ParseUint(address, 10, 32)
		l, err = vmdev.Listen(uint32(port))
	}
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("ready", "listen", network+":"+address)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		log.Info("shutting down", "signal", s)
		a.Shutdown(protocol.DefaultShutdownGrace)
	}()
	if err := a.Serve(l); err != nil {
		return err
	}
	log.Info("shut down")
	return nil
}

// listenAddress parses --listen: "unix:PATH", "vsock:PORT", or "" for
// vsock on the config's port.
func listenAddress(flagValue string, cfg *protocol.Config) (network, address string, err error) {
	if flagValue == "" {
		return "vsock", strconv.FormatUint(uint64(cfg.ListenPort()), 10), nil
	}
	network, address, ok := strings.Cut(flagValue, ":")
	switch {
	case ok && network == "unix" && address != "":
		return network, address, nil
	case ok && network == "vsock":
		if _, err := strconv.ParseUint(address, 10, 32); err == nil {
			return network, address, nil
		}
	}
	return "", "", fmt.Errorf("--listen %q: want unix:PATH or vsock:PORT", flagValue)
}
