package main

import (
	"fmt"
	"path"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watch prints the inotify events of dirs, a line each, until killed.
func watch(dirs []string) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	const mask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO
	names := map[int32]string{}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(fd, d, mask)
		if err != nil {
			return fmt.Errorf("watch %s: %w", d, err)
		}
		names[int32(wd)] = d
	}
	fmt.Println("ready")
	ops := []struct {
		bit  uint32
		name string
	}{
		{unix.IN_CREATE, "create"}, {unix.IN_MODIFY, "modify"}, {unix.IN_CLOSE_WRITE, "close_write"}, {unix.IN_ATTRIB, "attrib"},
		{unix.IN_DELETE, "delete"}, {unix.IN_MOVED_FROM, "moved_from"}, {unix.IN_MOVED_TO, "moved_to"},
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read inotify: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			for _, op := range ops {
				if ev.Mask&op.bit == 0 {
					continue
				}
				kind := op.name
				if ev.Mask&unix.IN_ISDIR != 0 {
					kind += ",dir"
				}
				fmt.Printf("%s %s\n", kind, path.Join(names[ev.Wd], name))
			}
		}
	}
}
