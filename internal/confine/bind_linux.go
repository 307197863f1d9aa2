package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// BindOver bind-mounts the directory or regular file at the absolute path
// p over itself, in the caller's mount namespace, read-only when readOnly
// is true. A mount point cannot be renamed or removed (EBUSY), so even a
// read-write bind pins p in place; a read-only one cannot be written
// through, whatever the file permissions say.
//
// p is opened once with openat2(RESOLVE_NO_SYMLINKS), and the mount is
// made by descriptor (open_tree, mount_setattr, move_mount; on kernels
// before 5.12 bind and remount through /proc/self/fd), so a symlink
// planted anywhere on the way, or at p itself, is refused and never makes
// it bind something else. Anything but a directory or a regular file is
// refused too.
func BindOver(p string, readOnly bool) error {
	f, err := openNoSymlinks(p, unix.O_PATH)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &fs.PathError{Op: "bind", Path: p, Err: err}
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		return &fs.PathError{Op: "bind", Path: p, Err: fmt.Errorf("%w: %s, want a directory or a regular file", ErrNotRegular, kind(unixType(t)))}
	}
	fd := int(f.Fd())
	err = bindNew(fd, readOnly)
	if errors.Is(err, unix.ENOSYS) {
		err = bindOld(p, fd, &st, readOnly)
	}
	if err != nil {
		return &fs.PathError{Op: "bind", Path: p, Err: err}
	}
	return nil
}

// bindNew mounts a clone of the tree at fd onto fd with the mount API of
// Linux 5.12.
func bindNew(fd int, readOnly bool) error {
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if readOnly {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
			return fmt.Errorf("mount_setattr: %w", err)
		}
	}
	if err := unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// bindOld binds fd over itself through /proc/self/fd and, for readOnly,
// remounts the new mount read-only through a descriptor of p opened
// again, which must be the same file, now the root of a mount.
func bindOld(p string, fd int, st *unix.Stat_t, readOnly bool) error {
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(self, self, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if !readOnly {
		return nil
	}
	f, err := openNoSymlinks(p, unix.O_PATH)
	if err != nil {
		return err
	}
	defer f.Close()
	var again unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO, &again); err != nil {
		return err
	}
	if again.Ino != st.Ino || unix.Mkdev(again.Dev_major, again.Dev_minor) != st.Dev || again.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return errors.New("replaced while being mounted")
	}
	mine := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := unix.Mount("", mine, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("remount read-only: %w", err)
	}
	return nil
}
