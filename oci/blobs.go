package oci

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	"github.com/krunbox/krunbox/internal/gunzip"
)

const chunkSize = 1 << 20

// blobFetch puts one compressed blob into the cache, downloading it to a
// temporary file that readers can follow while it grows; the file is
// renamed into blobs/ once its size and digest are verified.
type blobFetch struct {
	desc v1.Descriptor

	mu     sync.Mutex
	cond   *sync.Cond
	f      *os.File // the blob, complete or growing
	n      int64    // bytes available in f
	done   bool
	err    error
	cached bool // it was in the cache already
	ended  chan struct{}
	// announced is closed once the fetch has reported its first state,
	// or has ended without one.
	announced chan struct{}
	// answered is closed once the source has answered the request for
	// the blob, or the fetch has ended without asking.
	answered     chan struct{}
	answeredOnce sync.Once
}

func newBlobFetch(desc v1.Descriptor) *blobFetch {
	b := &blobFetch{desc: desc, ended: make(chan struct{}), announced: make(chan struct{}), answered: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// run fetches the blob and reports progress; it ends when ctx is done.
func (b *blobFetch) run(ctx context.Context, s *Store, sp layerSpec, pool *chunkPool, report func(ProgressState, int64)) {
	defer close(b.ended)
	defer b.markAnswered()
	var once sync.Once
	announce := func() { once.Do(func() { close(b.announced) }) }
	defer announce()
	err := b.fetch(ctx, s, sp, pool, func(state ProgressState, done int64) {
		report(state, done)
		announce()
	})
	b.mu.Lock()
	b.done, b.err = true, err
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *blobFetch) markAnswered() { b.answeredOnce.Do(func() { close(b.answered) }) }

func (b *blobFetch) setFile(f *os.File, n int64, cached bool) {
	b.mu.Lock()
	b.f, b.n, b.cached = f, n, cached
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *blobFetch) openCached(s *Store) bool {
	f, err := os.Open(s.blobPath(b.desc.Digest))
	if err != nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != b.desc.Size {
		f.Close()
		return false
	}
	b.setFile(f, fi.Size(), true)
	return true
}

// fetch takes its download buffer from pool.
func (b *blobFetch) fetch(ctx context.Context, s *Store, sp layerSpec, pool *chunkPool, report func(ProgressState, int64)) error {
	d := b.desc.Digest
	if b.openCached(s) {
		report(LayerCached, b.desc.Size)
		return nil
	}
	unlock, err := lockFile(ctx, s.path("locks", "blob-"+d.Hex+".lock"), true)
	if err != nil {
		return &BlobError{Digest: d, Err: err}
	}
	defer unlock()
	if b.openCached(s) { // another process fetched it meanwhile
		report(LayerCached, b.desc.Size)
		return nil
	}
	if sp.open == nil {
		return &BlobError{Digest: d, Err: errors.New("not in the cache")}
	}
	if d.Algorithm != "sha256" {
		return &BlobError{Digest: d, Err: fmt.Errorf("unsupported digest algorithm %q", d.Algorithm)}
	}
	report(LayerFetching, 0)
	rc, err := sp.open()
	b.markAnswered()
	if err != nil {
		return &BlobError{Digest: d, Err: fmt.Errorf("download: %w", err)}
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(s.path("tmp"), "blob-"+d.Hex[:12]+"-")
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			os.Remove(tmp.Name())
		}
	}()
	b.setFile(tmp, 0, false)
	h := sha256.New()
	c := pool.get()
	defer pool.put(c)
	buf := c.b
	var total, reported int64
	for {
		// Fill the buffer before writing: a network read returns a few
		// KiB, and each write wakes the reader.
		n, rerr := io.ReadFull(rc, buf)
		if rerr == io.ErrUnexpectedEOF {
			rerr = io.EOF
		}
		if n > 0 {
			if _, err := tmp.Write(buf[:n]); err != nil {
				return &BlobError{Digest: d, Err: err}
			}
			if !sp.verified {
				h.Write(buf[:n])
			}
			total += int64(n)
			b.mu.Lock()
			b.n = total
			b.cond.Broadcast()
			b.mu.Unlock()
			if total-reported >= 4*chunkSize {
				report(LayerFetching, total)
				reported = total
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil && total == b.desc.Size {
			// All bytes arrived: the source's own verification failed.
			return &BlobError{Digest: d, Err: fmt.Errorf("corrupt: %w", rerr)}
		}
		if rerr != nil {
			return &BlobError{Digest: d, Err: fmt.Errorf("download interrupted after %d of %d bytes: %w", total, b.desc.Size, rerr)}
		}
		if total > b.desc.Size {
			return &BlobError{Digest: d, Err: fmt.Errorf("the registry sent more than the %d bytes the manifest says", b.desc.Size)}
		}
	}
	if total != b.desc.Size {
		return &BlobError{Digest: d, Err: fmt.Errorf("corrupt: got %d bytes, want %d", total, b.desc.Size)}
	}
	if !sp.verified {
		if got := (v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}); got != d {
			return &BlobError{Digest: d, Err: fmt.Errorf("corrupt: got content with digest %s", got)}
		}
	}
	if err := os.Rename(tmp.Name(), s.blobPath(d)); err != nil {
		return &BlobError{Digest: d, Err: err}
	}
	keep = true
	report(LayerFetched, total)
	return nil
}

// reader follows the blob as it is fetched.
func (b *blobFetch) reader() io.Reader { return &fetchReader{b: b} }

// close waits for the fetch to end and closes its file.
func (b *blobFetch) close() {
	<-b.ended
	if b.f != nil {
		b.f.Close()
	}
}

type fetchReader struct {
	b   *blobFetch
	off int64
}

func (r *fetchReader) Read(p []byte) (int, error) {
	b := r.b
	b.mu.Lock()
	for b.n == r.off && !b.done && b.err == nil {
		b.cond.Wait()
	}
	err, avail, f := b.err, b.n-r.off, b.f
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if avail == 0 {
		return 0, io.EOF
	}
	n, err := f.ReadAt(p[:min(int64(len(p)), avail)], r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// decompress streams the layer blob through its decompressor into pipe,
// whose reader checks the digest of the uncompressed content (the diff_id)
// at the end of the stream. Whichever side is not the slower one hashes
// it: the reader, behind a decompressor that inflates as it is read; the
// decompressor, when it has inflated in memory ahead of its reads.
func decompress(ctx context.Context, s *Store, b *blobFetch, sp layerSpec, pipe *chunkPipe) {
	pipe.verify = func(got v1.Hash) error {
		if got == sp.diffID {
			return nil
		}
		return s.blobFailed(b, sp, &DiffIDError{Layer: sp.desc.Digest, DiffID: sp.diffID, Got: got})
	}
	err := decompressTo(ctx, b, sp, pipe)
	if err != nil {
		err = s.blobFailed(b, sp, err)
	}
	pipe.finish(err)
}

// blobFailed returns the error to report for a layer whose content failed
// with err.
func (s *Store) blobFailed(b *blobFetch, sp layerSpec, err error) error {
	if !b.isCached() {
		// Damaged data may reach the decompressor before the download
		// ends and its digest check names the problem: prefer that.
		<-b.ended
		if b.err != nil {
			return b.err
		}
	}
	if err != nil && b.isCached() && !errors.Is(err, context.Canceled) {
		err = s.dropDamaged(sp.desc, err)
	}
	return err
}

// dropDamaged checks the cached blob of desc after err stopped its reading:
// a damaged copy is removed, so that the next pull fetches it again, and
// the error says so. An intact one stays: its content is what the image's
// source has, and fetching it again cannot help.
func (s *Store) dropDamaged(desc v1.Descriptor, err error) error {
	if s.blobIntact(desc) {
		return err
	}
	os.Remove(s.blobPath(desc.Digest))
	return fmt.Errorf("%w (the cached copy was damaged and has been removed: pull again)", err)
}

// blobIntact reports whether the cached blob of desc has its size and
// digest.
func (s *Store) blobIntact(desc v1.Descriptor) bool {
	f, err := os.Open(s.blobPath(desc.Digest))
	if err != nil {
		return false
	}
	defer f.Close()
	h, n, err := v1.SHA256(f)
	return err == nil && n == desc.Size && h == desc.Digest
}

// DiffIDError reports a layer whose uncompressed content does not have the
// digest (diff_id) the image's config lists for it. The layer blob itself
// has the digest the manifest says: the image is broken at its source.
type DiffIDError struct {
	Layer  v1.Hash // the layer's (compressed) digest, from the manifest
	DiffID v1.Hash // its diff_id, from the image config
	Got    v1.Hash // the digest of its uncompressed content
}

func (e *DiffIDError) Error() string {
	return fmt.Sprintf("the image's config and layer %s disagree: the config says its uncompressed digest (diff_id) is %s, but it is %s; the image is broken at its source",
		e.Layer, e.DiffID, e.Got)
}

// Hint tells the user what to do.
func (e *DiffIDError) Hint() string {
	return "pulling again will not help: the image must be rebuilt or pushed again by whoever publishes it"
}

func (b *blobFetch) isCached() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cached
}

func decompressTo(ctx context.Context, b *blobFetch, sp layerSpec, pipe *chunkPipe) error {
	br := bufio.NewReaderSize(b.reader(), 64<<10)
	magic, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return err
	}
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gunzip.NewReader(br)
		if err != nil {
			return &BlobError{Digest: sp.desc.Digest, Err: fmt.Errorf("gzip: %w", err)}
		}
		defer zr.Close()
		r = zr
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return &BlobError{Digest: sp.desc.Digest, Err: fmt.Errorf("zstd: %w", err)}
		}
		defer zr.Close()
		r = zr
	}
	for {
		c := pipe.free.get()
		n, rerr := io.ReadFull(r, c.b)
		c.b = c.b[:n]
		if n > 0 {
			if err := pipe.send(ctx, c); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return nil
		}
		if rerr != nil {
			var be *BlobError
			if errors.As(rerr, &be) {
				return rerr
			}
			return &BlobError{Digest: sp.desc.Digest, Err: fmt.Errorf("decompress: %w", rerr)}
		}
	}
}

// chunkPipe carries a decompressed layer from its decompressor to the
// applier in 1 MiB chunks, with a few chunks of slack so that both run at
// once. A goroutine of its own hashes the chunks while the applier reads
// them, so that the diff_id delays neither (on two cores, inflating,
// hashing and applying one layer take about 1.2, 0.5 and 1 ms a MiB). At
// the end of the stream the reader has verify check the digest.
type chunkPipe struct {
	ch     chan *chunk // to the reader
	hashCh chan *chunk // to the hasher
	free   *chunkPool
	sum    chan v1.Hash // the digest, once hashCh is closed
	err    error        // set before ch is closed
	cur    *chunk
	off    int
	verify func(v1.Hash) error // set before the first send
}

// chunk is a buffer that the reader and the hasher share: the last one
// done with it gives it back.
type chunk struct {
	b    []byte
	refs atomic.Int32
}

const pipeChunks = 8

// chunkPool hands out the chunks of a pull (the decompressed layers' and
// the downloads' buffers) and keeps those the pull is done with, for the
// next ones: memory the process has used already is much cheaper to fill
// than new memory. The pull holds at most (lookahead+1) * (pipeChunks+2)
// chunks for its layers and one for each download at once; the pool
// carves that many from one block that the kernel may back with huge
// pages (hugeBytes). Filling 4 KiB pages never touched costs a page fault
// each, about 10 µs in a virtual machine whose kernel runs paravirtualized
// (7,000 of them were 40% of a cold pull's page faults, in the inflater's
// output), against one fault for 2 MiB.
type chunkPool struct {
	free chan *chunk
	mu   sync.Mutex
	rest []byte // not handed out yet
}

func newChunkPool(jobs int) *chunkPool {
	n := (lookahead+1)*(pipeChunks+2) + jobs
	return &chunkPool{free: make(chan *chunk, n), rest: hugeBytes(n * chunkSize)}
}

// get returns a chunk of chunkSize bytes.
func (p *chunkPool) get() *chunk {
	select {
	case c := <-p.free:
		c.b = c.b[:cap(c.b)]
		return c
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.rest) < chunkSize {
		return &chunk{b: make([]byte, chunkSize)}
	}
	c := &chunk{b: p.rest[:chunkSize:chunkSize]}
	p.rest = p.rest[chunkSize:]
	return c
}

// put keeps c for a later get, if the pool has room for it.
func (p *chunkPool) put(c *chunk) {
	select {
	case p.free <- c:
	default:
	}
}

func newChunkPipe(free *chunkPool) *chunkPipe {
	p := &chunkPipe{
		ch:     make(chan *chunk, pipeChunks),
		hashCh: make(chan *chunk, pipeChunks),
		free:   free,
		sum:    make(chan v1.Hash, 1),
	}
	go p.hash()
	return p
}

func (p *chunkPipe) hash() {
	h := sha256.New()
	for c := range p.hashCh {
		h.Write(c.b)
		p.release(c)
	}
	p.sum <- v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

// release gives c back once both its readers are done with it.
func (p *chunkPipe) release(c *chunk) {
	if c.refs.Add(-1) == 0 {
		p.free.put(c)
	}
}

func (p *chunkPipe) send(ctx context.Context, c *chunk) error {
	c.refs.Store(2)
	for _, ch := range []chan *chunk{p.hashCh, p.ch} {
		select {
		case ch <- c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// finish ends the stream, with err (nil for a clean end).
func (p *chunkPipe) finish(err error) {
	p.err = err
	close(p.hashCh)
	close(p.ch)
}

// failed returns the producer's error, if it has ended with one; it does
// not wait.
func (p *chunkPipe) failed() error {
	for {
		select {
		case _, ok := <-p.ch:
			if !ok {
				return p.err
			}
			// The applier has stopped: drop the rest.
		default:
			return nil
		}
	}
}

func (p *chunkPipe) Read(b []byte) (int, error) {
	for p.cur == nil || p.off == len(p.cur.b) {
		if p.cur != nil {
			p.release(p.cur)
			p.cur = nil
		}
		c, ok := <-p.ch
		if !ok {
			if p.err == nil && p.verify != nil {
				p.err = p.verify(<-p.sum)
				p.verify = nil
			}
			if p.err != nil {
				return 0, p.err
			}
			return 0, io.EOF
		}
		p.cur, p.off = c, 0
	}
	n := copy(b, p.cur.b[p.off:])
	p.off += n
	return n, nil
}
