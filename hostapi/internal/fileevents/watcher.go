// Package fileevents watches a sandbox's shares on the host and hands the
// changes, coalesced in batches and named by guest paths, to a sender that
// delivers them to the guest agent (protocol.TypeFileEvents), so that the
// guest's file watchers wake for host edits: virtio-fs tells the guest
// kernel nothing of them.
//
// The watcher lives in the sandbox's runner process and ends with it. It
// watches each share's own directories through fsnotify (inotify on Linux,
// kqueue on macOS), never through a symbolic link: every directory is
// opened below its parent's descriptor refusing links, and on Linux the
// watch is placed on that descriptor (/proc/self/fd/N), so a link planted
// by the guest or a repository cannot point it outside the share. Everything
// it holds is bounded ([Limits]); past a bound it reports a coarser event
// (a modify of the share's root or of the directory it cannot watch), logs
// once, and never blocks the share or the VM.
package fileevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/confine"
)

// Default limits of one sandbox's watcher.
const (
	// DefaultMaxDirs bounds the directories watched: one inotify watch and
	// one descriptor each (about 1 KiB of kernel memory). A workspace with
	// node_modules has tens of thousands; past the bound, directories are
	// not watched and the runner log says so once.
	DefaultMaxDirs = 65536
	// DefaultMaxPaths bounds the paths one batch holds. A larger burst (a
	// checkout of more files) becomes a modify of each share's root.
	DefaultMaxPaths = 16384
	// DefaultMaxBytes bounds the bytes of the paths one batch holds.
	DefaultMaxBytes = 4 << 20
	// DefaultWindow is how long a batch gathers changes after its first
	// one before it is handed to the sender.
	DefaultWindow = 50 * time.Millisecond
)

// Limits bound one sandbox's watcher. Zero fields take the defaults.
type Limits struct {
	// MaxDirs bounds the directories watched (DefaultMaxDirs).
	MaxDirs int `json:"max_dirs,omitempty"`
	// MaxPaths bounds the paths one batch holds (DefaultMaxPaths).
	MaxPaths int `json:"max_paths,omitempty"`
	// MaxBytes bounds the bytes of paths one batch holds (DefaultMaxBytes).
	MaxBytes int `json:"max_bytes,omitempty"`
	// Window is the coalescing window of a batch (DefaultWindow).
	Window time.Duration `json:"window_ns,omitempty"`
}

func (l Limits) withDefaults() Limits {
	l.MaxDirs = cmpOr(l.MaxDirs, DefaultMaxDirs)
	l.MaxPaths = cmpOr(l.MaxPaths, DefaultMaxPaths)
	l.MaxBytes = cmpOr(l.MaxBytes, DefaultMaxBytes)
	l.Window = cmpOr(l.Window, DefaultWindow)
	return l
}

func cmpOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Share is a host directory the guest mounts, to watch.
type Share struct {
	// HostPath is the shared directory: absolute, without symlinks.
	HostPath string `json:"host_path"`
	// GuestPath is where the guest mounts it: absolute and clean.
	GuestPath string `json:"guest_path"`
	// Exclude are host paths below HostPath not to watch (the isolated
	// checkouts' protected git directories).
	Exclude []string `json:"exclude,omitempty"`
}

// Deliver hands a batch of events to the guest. An error stops the watcher.
type Deliver func(ctx context.Context, events []protocol.FileEvent) error

// Watcher watches shares. Create it with New, run it with Run.
type Watcher struct {
	log    *slog.Logger
	lim    Limits
	fsw    *fsnotify.Watcher
	shares []*share
	dirs   map[string]*dir // by watch name; the event loop's own
	ndirs  atomic.Int64    // len(dirs), for Dirs

	// renamed is a directory renamed away by the last event, still
	// watched (and in dirs) until the next (holdRenamed); renamedName is
	// that event's name. The event loop's own.
	renamed     *dir
	renamedName string

	ready chan struct{} // a batch's window has passed

	mu      sync.Mutex
	pending *batch
	warned  map[string]bool
}

type share struct {
	Share
	exclude map[string]bool
	root    *dir
}

// dir is a watched directory, held open.
type dir struct {
	share    *share
	rel      string // below the share's root; "" for the root
	name     string // the watch's name in fsnotify's events
	f        *os.File
	parent   *dir
	children map[string]*dir
}

func (d *dir) hostPath() string  { return path.Join(d.share.HostPath, d.rel) }
func (d *dir) guestPath() string { return path.Join(d.share.GuestPath, d.rel) }

// errDirLimit is the watcher's own bound on directories.
var errDirLimit = errors.New("directory limit reached")

// New watches every directory of shares (those it can, within lim). It
// reports no event for what is already there.
func New(shares []Share, lim Limits, log *slog.Logger) (*Watcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("file events: %w", err)
	}
	lim = lim.withDefaults()
	w := &Watcher{
		log:     log,
		lim:     lim,
		fsw:     fsw,
		dirs:    make(map[string]*dir),
		ready:   make(chan struct{}, 1),
		pending: newBatch(lim.MaxPaths, lim.MaxBytes),
		warned:  make(map[string]bool),
	}
	for _, s := range shares {
		sh := &share{Share: s, exclude: make(map[string]bool)}
		for _, e := range s.Exclude {
			sh.exclude[path.Clean(e)] = true
		}
		f, err := confine.OpenDirNoSymlinks(s.HostPath)
		if err == nil {
			sh.root, err = w.watch(sh, nil, "", f)
		}
		if err != nil {
			w.close()
			return nil, fmt.Errorf("file events: watch %s: %w", s.HostPath, err)
		}
		w.shares = append(w.shares, sh)
		w.walk(sh.root, false)
	}
	return w, nil
}

// Dirs returns the number of directories watched.
func (w *Watcher) Dirs() int { return int(w.ndirs.Load()) }

// Run watches until ctx ends or deliver fails, handing each batch to
// deliver one at a time: while deliver runs, the next batch gathers. It
// releases everything (watches, descriptors, goroutines) before it returns.
func (w *Watcher) Run(ctx context.Context, deliver Deliver) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		w.loop(ctx)
	}()
	err := w.deliverLoop(ctx, deliver)
	cancel()
	w.fsw.Close() // ends loop's reads
	wg.Wait()
	w.close()
	if ctx.Err() != nil && err == nil {
		return nil
	}
	return err
}

func (w *Watcher) deliverLoop(ctx context.Context, deliver Deliver) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.ready:
		}
		w.mu.Lock()
		events := w.pending.take()
		w.mu.Unlock()
		if len(events) == 0 {
			continue
		}
		if err := deliver(ctx, events); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("file events: deliver: %w", err)
		}
	}
}

// loop reads fsnotify's events until ctx ends. It never blocks on the
// sender: it only folds events into the pending batch.
func (w *Watcher) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			w.handle(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.handleError(err)
		}
	}
}

// handleError handles an error of fsnotify's: the kernel's queue
// overflowed (events were lost), or a read failed.
func (w *Watcher) handleError(err error) {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		w.warnOnce("kernel", "file events: the kernel's event queue overflowed (fs.inotify.max_queued_events): the guest is told to rescan the shares")
		w.overflowAll()
		return
	}
	w.log.Debug("file events: watcher error", "err", err)
}

// overflowAll makes the pending batch a coarse modify of every share root.
func (w *Watcher) overflowAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	wasEmpty := w.pending.empty()
	for _, s := range w.shares {
		if w.pending.overflow == nil {
			w.pending.overflowTo(s.GuestPath)
		}
		w.pending.overflow[s.GuestPath] = true
	}
	if wasEmpty {
		w.arm()
	}
}

// handle folds one fsnotify event into the pending batch, watching new
// directories and forgetting removed ones.
func (w *Watcher) handle(ev fsnotify.Event) {
	var from string
	if ev.Has(fsnotify.Create) {
		from = renamedFrom(ev)
	}
	moved := w.takeRenamed(from)
	parentName, child := splitName(ev.Name)
	d := w.dirs[parentName]
	if d == nil || child == "" {
		if moved != nil {
			w.unwatch(moved)
		}
		return // an event on a watched directory itself: its parent reports it
	}
	p := path.Join(d.guestPath(), child)
	if ev.Has(fsnotify.Create) {
		w.created(d, child, p, from, moved)
	}
	if ev.Has(fsnotify.Write) {
		w.add(d.share, p, protocol.FileModify, false)
	}
	if ev.Has(fsnotify.Chmod) {
		w.add(d.share, p, protocol.FileAttrib, false)
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		op := protocol.FileDelete
		if sub := d.children[child]; sub != nil {
			op = protocol.FileDeleteDir
			if ev.Has(fsnotify.Rename) {
				w.holdRenamed(sub, ev.Name)
			} else {
				w.unwatch(sub)
			}
		}
		if ev.Has(fsnotify.Rename) {
			w.fold(func(b *batch) bool { return b.renameFrom(d.share.GuestPath, p, op) })
		} else {
			w.add(d.share, p, op, false)
		}
	}
}

// created handles child appearing in d, at guest path p: created, or
// renamed there from the event name from when fsnotify paired the rename's
// halves. moved is the directory the watcher held since the rename's first
// half (holdRenamed), if any.
func (w *Watcher) created(d *dir, child, p, from string, moved *dir) {
	if old := d.children[child]; old != nil {
		w.unwatch(old) // replaced
	}
	var st unix.Stat_t
	isDir := unix.Fstatat(int(d.f.Fd()), child, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	if oldPath := w.guestPathOf(d.share, from); oldPath != "" {
		w.fold(func(b *batch) bool { return b.renameTo(d.share.GuestPath, oldPath, p, isDir) })
	} else {
		w.add(d.share, p, protocol.FileCreate, isDir)
	}
	if moved != nil && (!isDir || moved.share != d.share || !sameFile(moved.f, &st)) {
		w.unwatch(moved) // not what is there now
		moved = nil
	}
	switch {
	case moved != nil:
		w.reattach(moved, d, child)
	case isDir:
		w.watchNew(d, child)
	}
}

// guestPathOf returns the guest path of the event name name (a watch's
// name and a child's) when it lies in s; "" otherwise.
func (w *Watcher) guestPathOf(s *share, name string) string {
	parentName, child := splitName(name)
	d := w.dirs[parentName]
	if d == nil || child == "" || d.share != s {
		return ""
	}
	return path.Join(d.guestPath(), child)
}

// renamedFrom returns the name that the file of ev, a Create, had before
// the rename that made it, when fsnotify paired the rename's two halves
// (inotify's IN_MOVED_FROM and IN_MOVED_TO, by their cookie); "" for a
// plain create or a rename from outside the watches. fsnotify keeps that
// name unexported and shows it only in Event.String, as
// `OP "NAME" ← "OLDNAME"` with both names quoted by %q, which escapes any
// byte a name may hold: this parses it back. TestRenamedFrom renames real
// files, so that a change of the format fails it.
func renamedFrom(ev fsnotify.Event) string {
	s, ok := strings.CutPrefix(ev.String(), ev.Op.String())
	if !ok {
		return ""
	}
	s = strings.TrimLeft(s, " ")
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return ""
	}
	if name, err := strconv.Unquote(q); err != nil || name != ev.Name {
		return ""
	}
	s, ok = strings.CutPrefix(s[len(q):], " ← ")
	if !ok {
		return ""
	}
	if q, err = strconv.QuotedPrefix(s); err != nil || q != s {
		return ""
	}
	old, err := strconv.Unquote(q)
	if err != nil {
		return ""
	}
	return old
}

// holdRenamed detaches sub, a watched directory renamed away by the event
// named name, from its parent, and keeps its watches until the next event:
// the rename's other half within the shares (handle's next event, nearly
// always) moves them under the new name (reattach); any other event
// unwatches it (takeRenamed), gone out of the shares.
func (w *Watcher) holdRenamed(sub *dir, name string) {
	delete(sub.parent.children, path.Base(sub.rel))
	sub.parent = nil
	w.renamed, w.renamedName = sub, name
}

// takeRenamed returns the directory held by holdRenamed when from, the
// event's old name, is its name; otherwise it unwatches that directory and
// returns nil.
func (w *Watcher) takeRenamed(from string) *dir {
	sub := w.renamed
	if sub == nil {
		return nil
	}
	w.renamed = nil
	if from == "" || from != w.renamedName {
		w.unwatch(sub)
		return nil
	}
	return sub
}

// reattach watches sub, a watched directory renamed to name below d, and
// the directories below it under their new paths. Only inotify pairs a
// rename's halves, and there each watch is named by its directory's
// descriptor (addwatch_linux.go), which the rename leaves valid: the
// watches below sub stay. Sub's own watch does not: fsnotify removes the
// watch of a directory that moved (at its IN_MOVE_SELF, which it handles
// before or after this), so it is made anew, with a new watch descriptor
// that fsnotify does not remove.
func (w *Watcher) reattach(sub, d *dir, name string) {
	sub.parent = d
	d.children[name] = sub
	sub.rel = path.Join(d.rel, name)
	if sub.share.exclude[sub.hostPath()] {
		w.unwatch(sub)
		return
	}
	w.fsw.Remove(sub.name) // fsnotify may have removed it already
	if _, err := addWatch(w.fsw, sub.f, sub.hostPath()); err != nil {
		w.unwatch(sub)
		w.limited(sub.share, sub.rel, err)
		return
	}
	stack := []*dir{sub}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for n, c := range p.children {
			c.rel = path.Join(p.rel, n)
			if c.share.exclude[c.hostPath()] {
				w.unwatch(c)
				continue
			}
			stack = append(stack, c)
		}
	}
}

// sameFile reports whether f is the file st describes.
func sameFile(f *os.File, st *unix.Stat_t) bool {
	var fst unix.Stat_t
	return unix.Fstat(int(f.Fd()), &fst) == nil && fst.Dev == st.Dev && fst.Ino == st.Ino
}

// splitName splits an event's name into its directory's watch name and the
// child's name.
func splitName(name string) (string, string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, ""
	}
	return name[:i], name[i+1:]
}

// add folds one event into the pending batch.
func (w *Watcher) add(s *share, p string, op protocol.FileEventOp, isDir bool) {
	w.fold(func(b *batch) bool { return b.add(s.GuestPath, p, op, isDir) })
}

// fold folds one event into the pending batch with f, which reports false
// when the batch overflowed, arming its window when it was empty.
func (w *Watcher) fold(f func(*batch) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wasEmpty := w.pending.empty()
	if !f(w.pending) {
		w.warnLocked("batch", fmt.Sprintf("file events: more than %d paths (or %d bytes) changed within one batch: the guest is told to rescan the shares instead", w.lim.MaxPaths, w.lim.MaxBytes))
	}
	if wasEmpty {
		w.arm()
	}
}

// arm signals the deliverer once the window has passed.
func (w *Watcher) arm() {
	time.AfterFunc(w.lim.Window, func() {
		select {
		case w.ready <- struct{}{}:
		default:
		}
	})
}

// watchNew watches a directory created under d and reports what it
// already holds as created.
func (w *Watcher) watchNew(d *dir, name string) {
	f, err := confine.OpenBeneath(d.f, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return // gone again, or a link now
	}
	sub, err := w.watch(d.share, d, name, f)
	if err != nil {
		w.limited(d.share, path.Join(d.rel, name), err)
		return
	}
	if sub != nil {
		w.walk(sub, true)
	}
}

// watch adds the watch of the directory f, named name below parent (nil
// for a share's root). It returns nil for an excluded directory.
func (w *Watcher) watch(s *share, parent *dir, name string, f *os.File) (*dir, error) {
	d := &dir{share: s, parent: parent, f: f, children: make(map[string]*dir)}
	if parent != nil {
		d.rel = path.Join(parent.rel, name)
	}
	if s.exclude[d.hostPath()] {
		f.Close()
		return nil, nil
	}
	if len(w.dirs) >= w.lim.MaxDirs {
		f.Close()
		return nil, errDirLimit
	}
	n, err := addWatch(w.fsw, f, d.hostPath())
	if err != nil {
		f.Close()
		return nil, err
	}
	d.name = n
	w.dirs[n] = d
	w.ndirs.Add(1)
	if parent != nil {
		parent.children[name] = d
	}
	return d, nil
}

// walk watches the directories below d; with report, it reports every
// entry as created.
func (w *Watcher) walk(d *dir, report bool) {
	stack := []*dir{d}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for {
			ents, err := d.f.ReadDir(1024)
			for _, e := range ents {
				p := path.Join(d.guestPath(), e.Name())
				if !e.IsDir() {
					if report {
						w.add(d.share, p, protocol.FileCreate, false)
					}
					continue
				}
				if report {
					w.add(d.share, p, protocol.FileCreate, true)
				}
				f, err := confine.OpenBeneath(d.f, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY, 0)
				if err != nil {
					continue
				}
				sub, err := w.watch(d.share, d, e.Name(), f)
				if err != nil {
					w.limited(d.share, path.Join(d.rel, e.Name()), err)
					continue
				}
				if sub != nil {
					stack = append(stack, sub)
				}
			}
			if err != nil {
				if err != io.EOF {
					w.log.Debug("file events: read directory", "dir", d.hostPath(), "err", err)
				}
				break
			}
		}
	}
}

// limited handles a directory that could not be watched: at a bound, it
// logs once and reports the directory as modified, for the guest to look.
func (w *Watcher) limited(s *share, rel string, err error) {
	switch {
	case errors.Is(err, errDirLimit):
		w.warnOnce("dirs", fmt.Sprintf("file events: more than %d directories in the shares: the guest sees no events below the ones past that (first: %s)", w.lim.MaxDirs, path.Join(s.HostPath, rel)))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		w.warnOnce("kernel-watches", fmt.Sprintf("file events: the host's limit on watches or files (fs.inotify.max_user_watches, open files) is reached: the guest sees no events below %s and others (%v)", path.Join(s.HostPath, rel), err))
	default:
		return // gone meanwhile
	}
	w.add(s, path.Join(s.GuestPath, rel), protocol.FileModify, false)
}

// unwatch forgets d and every directory below it.
func (w *Watcher) unwatch(d *dir) {
	stack := []*dir{d}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range d.children {
			stack = append(stack, c)
		}
		w.fsw.Remove(d.name) // the kernel may have dropped it already
		delete(w.dirs, d.name)
		w.ndirs.Add(-1)
		d.f.Close()
	}
	if d.parent != nil {
		delete(d.parent.children, path.Base(d.rel))
	}
}

func (w *Watcher) warnOnce(kind, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnLocked(kind, msg)
}

func (w *Watcher) warnLocked(kind, msg string) {
	if w.warned[kind] {
		return
	}
	w.warned[kind] = true
	w.log.Warn(msg)
}

// close releases the watches and descriptors.
func (w *Watcher) close() {
	w.fsw.Close()
	for _, d := range w.dirs {
		d.f.Close()
	}
	w.dirs = nil
	w.ndirs.Store(0)
}
