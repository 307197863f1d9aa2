package oci

import (
	"testing"
	"unsafe"
)

// TestChunkPool: the pool carves its chunks from one block, each with its
// own chunkSize bytes, gives back the chunks put into it before carving
// more, and makes new ones once the block is used up.
func TestChunkPool(t *testing.T) {
	const jobs = 2
	p := newChunkPool(jobs)
	n := (lookahead+1)*(pipeChunks+2) + jobs
	block := unsafe.Pointer(unsafe.SliceData(p.rest))
	if len(p.rest) != n*chunkSize {
		t.Fatalf("block of %d bytes, want %d chunks of %d", len(p.rest), n, chunkSize)
	}
	var chunks []*chunk
	for i := range n {
		c := p.get()
		if len(c.b) != chunkSize || cap(c.b) != chunkSize {
			t.Fatalf("chunk %d: len %d cap %d, want %d: a chunk must not reach into the next one", i, len(c.b), cap(c.b), chunkSize)
		}
		if got := unsafe.Pointer(unsafe.SliceData(c.b)); got != unsafe.Add(block, i*chunkSize) {
			t.Fatalf("chunk %d at %p, want %p: not carved in order from the block", i, got, unsafe.Add(block, i*chunkSize))
		}
		c.b[0], c.b[chunkSize-1] = byte(i), byte(i)
		chunks = append(chunks, c)
	}
	for i, c := range chunks {
		if c.b[0] != byte(i) || c.b[chunkSize-1] != byte(i) {
			t.Fatalf("chunk %d was overwritten by another", i)
		}
	}
	extra := p.get() // the block is used up
	if len(extra.b) != chunkSize {
		t.Fatalf("chunk beyond the block: %d bytes, want %d", len(extra.b), chunkSize)
	}
	for i := uintptr(0); i < uintptr(n); i++ {
		if unsafe.Pointer(unsafe.SliceData(extra.b)) == unsafe.Add(block, i*chunkSize) {
			t.Fatal("a chunk beyond the block shares the block's memory")
		}
	}

	chunks[3].b = chunks[3].b[:10] // as a short last read leaves it
	p.put(chunks[3])
	if c := p.get(); c != chunks[3] || len(c.b) != chunkSize {
		t.Fatalf("got %p (%d bytes), want the chunk put back, whole", c, len(c.b))
	}
	for _, c := range append(chunks, extra) {
		p.put(c) // one more than the pool keeps: dropped, not blocking
	}
	if len(p.free) != n {
		t.Fatalf("the pool keeps %d chunks, want %d", len(p.free), n)
	}
}
