package deadletter

import (
	"encoding/binary"
	"os"
)

// UsedBytes returns, for the store file at path, the offsets of the bytes
// a reader of the file may read: in each page below the meta page's
// high-water mark, in use or free, its header and what its header says it
// holds (a meta, the freelist's ids, the elements and their keys and
// values), not the unused rest of the page.
func UsedBytes(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w := &walker{r: f, size: int64(len(data))}
	if _, err := w.readMetas(); err != nil {
		return nil, err
	}
	ps, le := int(w.pageSize), binary.LittleEndian
	var out []int
	for id := 0; id < int(w.meta.pgid) && (id+1)*ps <= len(data); id++ {
		p := data[id*ps : (id+1)*ps]
		flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
		end := pageHeaderSize
		switch flags {
		case flagMeta:
			end += metaSize
		case flagFreelist:
			end += 8 * count
		case flagBranch, flagLeaf:
			end += count * leafElemSize
			for i := range count {
				off := pageHeaderSize + i*leafElemSize
				e := off + int(le.Uint32(p[off+4:])) + int(le.Uint32(p[off+8:]))
				if flags == flagLeaf {
					e += int(le.Uint32(p[off+12:]))
				} else {
					e = off + int(le.Uint32(p[off:])) + int(le.Uint32(p[off+4:]))
				}
				end = max(end, e)
			}
		}
		for i := id * ps; i < id*ps+min(end, ps); i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
