package repo

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"testing"
)

// packOf builds a pack of entries (type, declared size, inflated data).
func packOf(entries ...packEntry) []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(entries)))
	for _, e := range entries {
		size := e.size
		c := byte(e.typ<<4) | byte(size&15)
		size >>= 4
		for size > 0 {
			b.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		b.WriteByte(c)
		if e.typ == packRefDelta {
			b.Write(make([]byte, 20))
		}
		z := zlib.NewWriter(&b)
		z.Write(e.data)
		z.Close()
	}
	b.Write(make([]byte, 20))
	return b.Bytes()
}

type packEntry struct {
	typ  int
	size int64
	data []byte
}

func delta(base, result uint64) []byte {
	b := binary.AppendUvarint(nil, base)
	return binary.AppendUvarint(b, result)
}

// TestScanPack: the pre-scan refuses what would make git allocate past
// the caps, before git reads a byte.
func TestScanPack(t *testing.T) {
	lim := Limits{MaxBytes: 1 << 20, MaxObjects: 10, MaxBlobBytes: 1 << 16, MaxExpandedBytes: 1 << 18}
	zeros := make([]byte, 1<<16)
	for _, tc := range []struct {
		name string
		pack []byte
		want error
	}{
		{"ok", packOf(packEntry{packBlob, 5, []byte("hello")}, packEntry{packRefDelta, 2, delta(5, 100)}), nil},
		{"blob over the cap", packOf(packEntry{packBlob, 1<<16 + 1, append(zeros, 0)}), ErrLimitExceeded},
		{"delta result over the cap", packOf(packEntry{packRefDelta, 6, delta(5, 1<<30)}), ErrLimitExceeded},
		{"delta base over the cap", packOf(packEntry{packRefDelta, 6, delta(1<<30, 5)}), ErrLimitExceeded},
		{"expands past the total", packOf(packEntry{packBlob, 1 << 16, zeros}, packEntry{packBlob, 1 << 16, zeros}, packEntry{packBlob, 1 << 16, zeros}, packEntry{packBlob, 1 << 16, zeros}, packEntry{packBlob, 1 << 16, zeros}), ErrLimitExceeded},
		{"inflates past its size (a bomb)", packOf(packEntry{packBlob, 10, zeros}), ErrUnsafe},
		{"shorter than its size", packOf(packEntry{packBlob, 10, []byte("abc")}), ErrUnsafe},
		{"too many objects", packOf(make([]packEntry, 11)...), ErrLimitExceeded},
		{"bad type", packOf(packEntry{5, 1, []byte("x")}), ErrUnsafe},
		{"cut short", packOf(packEntry{packBlob, 5, []byte("hello")})[:16], ErrUnsafe},
		{"not a pack", []byte("PACX...."), ErrUnsafe},
	} {
		err := scanPack(bytes.NewReader(tc.pack), 20, lim)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
