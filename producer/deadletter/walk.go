package deadletter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
)

// This file reads a store's file without the engine, page by page with
// ReadAt, checking every bound before it uses a value: what bbolt (v1.4.3)
// trusts. Open runs it before bbolt reads anything past the meta pages, so
// that bbolt only ever sees a file whose pages in use are all sound; Check
// and Salvage run it to say what is damaged and to copy what is not.
//
// The layout, as bbolt writes it (go.etcd.io/bbolt internal/common: page.go,
// meta.go, bucket.go; integers in the machine's order, little-endian here):
//
//	page:    id uint64 | flags uint16 | count uint16 | overflow uint32 | data
//	meta:    (in page 0 and 1, after the page header) magic uint32 |
//	         version uint32 | pageSize uint32 | flags uint32 |
//	         root bucket (root pgid uint64, sequence uint64) | freelist pgid |
//	         pgid (the high-water mark: pages in use) | txid | FNV-64a checksum
//	branch element: pos uint32 | ksize uint32 | pgid uint64
//	leaf element:   flags uint32 | pos uint32 | ksize uint32 | vsize uint32
//	bucket value:   root pgid uint64 | sequence uint64 | (root 0: an inline leaf page)
const (
	pageHeaderSize   = 16
	branchElemSize   = 16
	leafElemSize     = 16
	bucketHeaderSize = 16
	metaSize         = 64

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10
	flagBucket   = 0x01 // a leaf element that is a bucket

	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	noFreelist     = ^uint64(0)
	maxTreeDepth   = 64 // a tree of 2^64 pages is no deeper
	maxBucketDepth = 8  // the store nests one bucket; a foreign file may nest a few
	maxProblems    = 50 // problems kept in a report; the rest are counted
)

// meta is a decoded meta page.
type meta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
	valid    error // nil when magic, version and checksum hold
}

func parseMeta(b []byte) meta {
	if len(b) < pageHeaderSize+metaSize {
		return meta{valid: errors.New("too short")}
	}
	m := b[pageHeaderSize : pageHeaderSize+metaSize]
	le := binary.LittleEndian
	out := meta{
		pageSize: le.Uint32(m[8:]), root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]),
		pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:]),
	}
	h := fnv.New64a()
	h.Write(m[:56])
	switch {
	case le.Uint32(m[0:]) != boltMagic:
		out.valid = errors.New("bad magic")
	case le.Uint32(m[4:]) != boltVersion:
		out.valid = fmt.Errorf("version %d", le.Uint32(m[4:]))
	case le.Uint64(m[56:]) != h.Sum64():
		out.valid = errors.New("checksum mismatch")
	}
	return out
}

// walker reads one store file.
type walker struct {
	r        io.ReaderAt
	size     int64
	pageSize uint64
	meta     meta // the meta page bbolt uses
	metaPage int  // 0 or 1

	reachable map[uint64]bool
	free      map[uint64]bool
	problems  []string
	metaNote  string // the meta page not in use is damaged: bbolt's fallback, not a problem for Open
	dropped   int    // problems not kept (over maxProblems)
	lostPages int    // pages of records skipped as damaged (their records are absent)
	// sealed and unsealed count the values of the records bucket read as
	// format 2 and as format 1 (see isSealed).
	sealed, unsealed int

	// onRecord, when set, is called with each key and value of the records
	// bucket, in the order of the pages; v is the walker's own copy.
	onRecord func(k, v []byte)
	// onDamaged, when set, is called with the key of each element of the
	// records bucket that is not a record.
	onDamaged func(k []byte, why string)
}

func (w *walker) problem(format string, args ...any) {
	if len(w.problems) >= maxProblems {
		w.dropped++
		return
	}
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// readMetas finds the page size and the meta page in use as bbolt's Open
// and DB.meta do (db.go getPageSize, meta): page 0's meta when valid, else
// page 1's at the sizes bbolt probes; then the valid meta of the higher
// transaction. It fails when bbolt would refuse the file.
func (w *walker) readMetas() (metas [2]meta, err error) {
	head := make([]byte, 4096)
	n, _ := w.r.ReadAt(head, 0)
	if n < pageHeaderSize+metaSize {
		return metas, fmt.Errorf("file is %d bytes: too short for a meta page", w.size)
	}
	m0 := parseMeta(head[:n])
	var ps uint64
	switch {
	case m0.valid == nil:
		ps = uint64(m0.pageSize)
	default:
		for i := 0; i <= 14; i++ {
			pos := int64(1024) << i
			if pos >= w.size-1024 {
				break
			}
			b := make([]byte, 4096)
			n, _ := w.r.ReadAt(b, pos)
			if m := parseMeta(b[:n]); m.valid == nil {
				ps = uint64(m.pageSize)
				break
			}
		}
	}
	if ps == 0 {
		return metas, errors.New("neither meta page is valid")
	}
	if ps < 1024 || ps > 1<<24 || ps&(ps-1) != 0 {
		return metas, fmt.Errorf("page size %d is not a power of two from 1 KiB to 16 MiB", ps)
	}
	w.pageSize = ps
	if w.size < int64(2*ps) {
		return metas, fmt.Errorf("file is %d bytes: shorter than its two meta pages of %d", w.size, ps)
	}
	for i := range metas {
		b := make([]byte, pageHeaderSize+metaSize)
		if _, err := w.r.ReadAt(b, int64(i)*int64(ps)); err != nil {
			return metas, fmt.Errorf("meta page %d: %v", i, err)
		}
		metas[i] = parseMeta(b)
		if metas[i].valid == nil && uint64(metas[i].pageSize) != ps {
			metas[i].valid = fmt.Errorf("page size %d, not %d", metas[i].pageSize, ps)
		}
	}
	a, b := 0, 1
	if metas[1].txid > metas[0].txid {
		a, b = 1, 0
	}
	switch {
	case metas[a].valid == nil:
		w.metaPage = a
	case metas[b].valid == nil:
		w.metaPage = b
	default:
		return metas, errors.New("neither meta page is valid")
	}
	w.meta = metas[w.metaPage]
	return metas, nil
}

// checkMeta checks the meta in use against the file: what bbolt does not.
// A problem it reports does not end the walk (the pages there are read as
// far as they go) unless fatal: no root page to start from.
func (w *walker) checkMeta() (fatal error) {
	m := w.meta
	if pages := uint64(w.size) / w.pageSize; m.pgid > pages {
		w.problem("file is %d bytes (%d pages of %d) but its meta page %d says %d pages are in use: truncated",
			w.size, pages, w.pageSize, w.metaPage, m.pgid)
	}
	switch {
	case m.pgid < 4:
		return fmt.Errorf("meta page %d: %d pages in use, fewer than a store's 4", w.metaPage, m.pgid)
	case m.root < 2 || m.root >= m.pgid:
		return fmt.Errorf("meta page %d: root page %d is out of bounds [2, %d)", w.metaPage, m.root, m.pgid)
	case m.freelist == noFreelist:
		w.problem("meta page %d: no freelist (this store always keeps one)", w.metaPage)
	}
	return nil
}

// readPage reads page id with its overflow pages, checking its id, its
// bounds and its type, and marks its pages reachable. what names it.
func (w *walker) readPage(id uint64, what string, want ...uint16) ([]byte, error) {
	if id < 2 || id >= w.meta.pgid {
		return nil, fmt.Errorf("%s: page %d is out of bounds [2, %d)", what, id, w.meta.pgid)
	}
	if w.reachable[id] {
		return nil, fmt.Errorf("%s: page %d is referenced twice", what, id)
	}
	if w.free[id] {
		return nil, fmt.Errorf("%s: page %d is in the freelist", what, id)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.r.ReadAt(hdr, int64(id*w.pageSize)); err != nil {
		return nil, fmt.Errorf("%s: page %d: %v", what, id, err)
	}
	le := binary.LittleEndian
	gotID, flags, overflow := le.Uint64(hdr[0:]), le.Uint16(hdr[8:]), uint64(le.Uint32(hdr[12:]))
	switch {
	case gotID != id:
		return nil, fmt.Errorf("%s: page %d holds page id %d", what, id, gotID)
	case !slices.Contains(want, flags):
		return nil, fmt.Errorf("%s: page %d has type flags %#x", what, id, flags)
	case id+overflow >= w.meta.pgid:
		return nil, fmt.Errorf("%s: page %d: %d overflow pages run past the %d in use", what, id, overflow, w.meta.pgid)
	}
	for i := id; i <= id+overflow; i++ {
		if w.reachable[i] || w.free[i] {
			return nil, fmt.Errorf("%s: page %d: its overflow page %d is also used elsewhere", what, id, i)
		}
	}
	for i := id; i <= id+overflow; i++ {
		w.reachable[i] = true
	}
	b := make([]byte, (overflow+1)*w.pageSize)
	if _, err := w.r.ReadAt(b, int64(id*w.pageSize)); err != nil {
		return nil, fmt.Errorf("%s: page %d: %v", what, id, err)
	}
	return b, nil
}

// readFreelist reads the freelist page; it must be read before the tree so
// that a branch pointing at a free page is caught.
func (w *walker) readFreelist() {
	w.free = map[uint64]bool{}
	if w.meta.freelist == noFreelist {
		return
	}
	b, err := w.readPage(w.meta.freelist, "freelist", flagFreelist)
	if err != nil {
		w.problem("%v", err)
		return
	}
	le := binary.LittleEndian
	count, start := uint64(le.Uint16(b[10:])), uint64(pageHeaderSize)
	if count == 0xFFFF {
		if len(b) < pageHeaderSize+8 {
			w.problem("freelist page %d: torn count", w.meta.freelist)
			return
		}
		count, start = le.Uint64(b[pageHeaderSize:]), pageHeaderSize+8
	}
	if count > (uint64(len(b))-start)/8 {
		w.problem("freelist page %d: %d ids do not fit in its %d bytes", w.meta.freelist, count, len(b))
		return
	}
	for i := range count {
		id := le.Uint64(b[start+8*i:])
		switch {
		case id < 2 || id >= w.meta.pgid:
			w.problem("freelist page %d: free page %d is out of bounds [2, %d)", w.meta.freelist, id, w.meta.pgid)
		case w.free[id]:
			w.problem("freelist page %d: page %d is free twice", w.meta.freelist, id)
		case w.reachable[id]:
			w.problem("freelist page %d: page %d is free and in use", w.meta.freelist, id)
		default:
			w.free[id] = true
		}
	}
}

// walk checks the whole file: the meta in use, the freelist, every page of
// every bucket, and that every page is either in use or free.
func (w *walker) walk() error {
	metas, err := w.readMetas()
	if err != nil {
		return err
	}
	if other := 1 - w.metaPage; metas[other].valid != nil {
		w.metaNote = fmt.Sprintf("meta page %d: %v: the store is read as of meta page %d (transaction %d); if the damaged one was the newer (not a write torn by a crash), what its transaction put is missing and what it deleted is back",
			other, metas[other].valid, w.metaPage, w.meta.txid)
	}
	if err := w.checkMeta(); err != nil {
		return err
	}
	w.reachable = map[uint64]bool{0: true, 1: true}
	w.readFreelist()
	w.tree(w.meta.root, nil, nil, 0, 0, "root bucket")
	leaked := 0
	for i := uint64(2); i < w.meta.pgid; i++ {
		if !w.reachable[i] && !w.free[i] {
			leaked++
			if w.isLeaf(i) {
				// A leaf no branch leads to (a damaged pointer leads
				// elsewhere) may hold records no walk reads: lost.
				w.lost(true)
			}
		}
	}
	if leaked > 0 {
		w.problem("%d pages are neither in use nor free", leaked)
	}
	return nil
}

// isLeaf tells whether page id's header names it a leaf page.
func (w *walker) isLeaf(id uint64) bool {
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.r.ReadAt(hdr, int64(id*w.pageSize)); err != nil {
		return false
	}
	return binary.LittleEndian.Uint64(hdr[0:]) == id && binary.LittleEndian.Uint16(hdr[8:]) == flagLeaf
}

// tree walks the page tree rooted at id, whose keys lie in [lo, hi) (nil:
// unbounded), of the bucket named by what; records says it is the records
// bucket.
func (w *walker) tree(id uint64, lo, hi []byte, depth, bucketDepth int, what string) {
	records := bucketDepth > 0
	if depth > maxTreeDepth {
		w.problem("%s: page %d: tree deeper than %d", what, id, maxTreeDepth)
		w.lost(records)
		return
	}
	b, err := w.readPage(id, what, flagBranch, flagLeaf)
	if err != nil {
		w.problem("%v", err)
		w.lost(records)
		return
	}
	w.elements(b, id, lo, hi, depth, bucketDepth, what)
}

func (w *walker) lost(records bool) {
	if records {
		w.lostPages++
	}
}

// elements checks the elements of page b (id 0: an inline page) and walks
// what they point to.
func (w *walker) elements(b []byte, id uint64, lo, hi []byte, depth, bucketDepth int, what string) {
	records := bucketDepth > 0 // the root holds buckets, the records bucket records
	le := binary.LittleEndian
	flags, count := le.Uint16(b[8:]), int(le.Uint16(b[10:]))
	branch := flags == flagBranch
	if count == 0 && (branch || id != 0 && (depth > 0 || bucketDepth > 0)) {
		// Only the root bucket's page of a new file, and an empty inline
		// bucket, are empty: bbolt removes an empty page from its parent,
		// and makes an empty bucket inline.
		w.problem("%s: page %d has no elements", what, id)
		w.lost(records)
		return
	}
	if pageHeaderSize+count*leafElemSize > len(b) {
		w.problem("%s: page %d: %d elements do not fit in its %d bytes", what, id, count, len(b))
		w.lost(records)
		return
	}
	type elem struct {
		flags uint32
		k, v  []byte
		child uint64
	}
	elems := make([]elem, 0, count)
	next := uint64(pageHeaderSize + count*leafElemSize) // branch elements are as large
	for i := range count {
		off := pageHeaderSize + i*leafElemSize
		var e elem
		var pos, ksize, vsize uint64
		if branch {
			pos, ksize, e.child = uint64(le.Uint32(b[off:])), uint64(le.Uint32(b[off+4:])), le.Uint64(b[off+8:])
		} else {
			e.flags, pos, ksize, vsize = le.Uint32(b[off:]), uint64(le.Uint32(b[off+4:])), uint64(le.Uint32(b[off+8:])), uint64(le.Uint32(b[off+12:]))
		}
		start := uint64(off) + pos
		if ksize == 0 || start+ksize+vsize > uint64(len(b)) {
			w.problem("%s: page %d: element %d (key %d bytes, value %d at offset %d) runs out of the page", what, id, i, ksize, vsize, start)
			w.lost(records)
			return
		}
		// bbolt writes the keys and values right after the elements, one
		// after the other (node.write): anywhere else, an element's count,
		// position or size was changed, and a record may be hidden.
		if start != next {
			w.problem("%s: page %d: element %d's key is at offset %d, not %d where the one before ends", what, id, i, start, next)
			w.lost(records)
			return
		}
		next = start + ksize + vsize
		e.k, e.v = b[start:start+ksize], b[start+ksize:start+ksize+vsize]
		elems = append(elems, e)
	}
	// bbolt writes a page into a zeroed buffer (tx.write clears the pages
	// it puts back in its pool): after the last element, only zeros. A
	// count made smaller leaves elements there.
	if rest := b[next:]; slices.ContainsFunc(rest, func(c byte) bool { return c != 0 }) {
		w.problem("%s: page %d: the %d bytes after its %d elements are not all zero", what, id, len(rest), count)
		w.lost(records)
		return
	}
	for i, e := range elems {
		switch {
		case i > 0 && bytes.Compare(elems[i-1].k, e.k) >= 0:
			w.problem("%s: page %d: keys out of order at element %d (%q after %q)", what, id, i, e.k, elems[i-1].k)
			w.lost(records)
			return
		case lo != nil && bytes.Compare(e.k, lo) < 0, hi != nil && bytes.Compare(e.k, hi) >= 0:
			w.problem("%s: page %d: key %q is outside its parent's range", what, id, e.k)
			w.lost(records)
			return
		}
	}
	for i, e := range elems {
		if branch {
			chi := hi
			if i+1 < len(elems) {
				chi = elems[i+1].k
			}
			w.tree(e.child, e.k, chi, depth+1, bucketDepth, what) // as bbolt's own check (tx_check.go)
			continue
		}
		switch {
		case e.flags != 0 && records:
			// The records bucket holds no bucket: a damaged record.
			w.problem("%s: page %d: element %d (key %q) has flags %#x", what, id, i, e.k, e.flags)
			if w.onDamaged != nil {
				w.onDamaged(bytes.Clone(e.k), fmt.Sprintf("its element on page %d has flags %#x", id, e.flags))
			}
		case e.flags == flagBucket:
			if !bytes.Equal(e.k, bucketRecords) {
				// Read as records all the same: a damaged name hides none.
				w.problem("%s: page %d: bucket %q is not this store's (%q)", what, id, e.k, bucketRecords)
			}
			w.bucket(e.k, e.v, bucketDepth, what)
		case !records:
			w.problem("%s: page %d: element %d (key %q, flags %#x) is not a bucket", what, id, i, e.k, e.flags)
		default:
			if isSealed(e.v) {
				w.sealed++
			} else {
				w.unsealed++
			}
			if w.onRecord != nil {
				w.onRecord(bytes.Clone(e.k), bytes.Clone(e.v))
			}
		}
	}
}

// bucket walks the bucket stored under name with value v.
func (w *walker) bucket(name, v []byte, bucketDepth int, parent string) {
	what := fmt.Sprintf("bucket %q", name)
	if parent != "root bucket" {
		what = parent + "/" + fmt.Sprintf("%q", name)
	}
	if bucketDepth >= maxBucketDepth {
		w.problem("%s: buckets nested deeper than %d", what, maxBucketDepth)
		return
	}
	if len(v) < bucketHeaderSize {
		w.problem("%s: bucket header of %d bytes", what, len(v))
		w.lost(true)
		return
	}
	root := binary.LittleEndian.Uint64(v)
	if root != 0 {
		w.tree(root, nil, nil, 0, bucketDepth+1, what)
		return
	}
	inline := v[bucketHeaderSize:]
	if len(inline) < pageHeaderSize || binary.LittleEndian.Uint16(inline[8:]) != flagLeaf {
		w.problem("%s: inline bucket is not a leaf page", what)
		w.lost(true)
		return
	}
	w.elements(inline, 0, nil, nil, 0, bucketDepth+1, what)
}
