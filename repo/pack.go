package repo

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
)

// Object types of a pack entry.
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packOfsDelta = 6
	packRefDelta = 7
)

// scanPack reads a pack (its header and every entry) in Go before git
// does, so that git is never handed an object past the caps: each
// object's size, and each delta's result, at most lim.MaxBlobBytes (a
// delta of a few bytes can ask git for gigabytes), and all of them
// together, inflated, at most lim.MaxExpandedBytes (a zlib bomb). It
// inflates every entry once, to find where the next starts.
func scanPack(r io.Reader, hashLen int, lim Limits) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || string(hdr[:4]) != "PACK" {
		return unsafe("", "the bundle's pack has no header")
	}
	n := binary.BigEndian.Uint32(hdr[8:])
	if int64(n) > lim.MaxObjects {
		return fmt.Errorf("%w: the changes hold %d objects, over the cap of %d", ErrLimitExceeded, n, lim.MaxObjects)
	}
	var expanded int64
	var zr io.ReadCloser // one inflater, reset per entry (a pack may hold a million)
	for i := uint32(0); i < n; i++ {
		c, err := br.ReadByte()
		if err != nil {
			return unsafe("", "the pack ends at object %d of %d", i, n)
		}
		typ := (c >> 4) & 7
		size := int64(c & 15)
		for shift := 4; c&0x80 != 0; shift += 7 {
			if shift > 56 {
				return unsafe("", "pack object %d: size too large", i)
			}
			if c, err = br.ReadByte(); err != nil {
				return unsafe("", "the pack ends in object %d", i)
			}
			size |= int64(c&0x7f) << shift
		}
		switch typ {
		case packCommit, packTree, packBlob, packTag:
		case packOfsDelta:
			for k := 0; ; k++ { // the base's offset: a varint
				if k > 9 {
					return unsafe("", "pack object %d: bad delta offset", i)
				}
				if c, err = br.ReadByte(); err != nil {
					return unsafe("", "the pack ends in object %d", i)
				}
				if c&0x80 == 0 {
					break
				}
			}
		case packRefDelta:
			if _, err := br.Discard(hashLen); err != nil {
				return unsafe("", "the pack ends in object %d", i)
			}
		default:
			return unsafe("", "pack object %d has type %d", i, typ)
		}
		if size > lim.MaxBlobBytes {
			return fmt.Errorf("%w: pack object %d is %d bytes, over the cap of %d", ErrLimitExceeded, i, size, lim.MaxBlobBytes)
		}
		if expanded += size; expanded > lim.MaxExpandedBytes {
			return fmt.Errorf("%w: the changes expand past %d bytes", ErrLimitExceeded, lim.MaxExpandedBytes)
		}
		if zr == nil {
			zr, err = zlib.NewReader(br)
		} else {
			err = zr.(zlib.Resetter).Reset(br, nil)
		}
		if err != nil {
			return unsafe("", "pack object %d: %v", i, err)
		}
		// At most size+1 bytes are inflated: one more than declared is
		// a refusal, not a bomb.
		lr := &io.LimitedReader{R: zr, N: size + 1}
		var data io.Reader = lr
		if typ == packOfsDelta || typ == packRefDelta {
			// A delta starts with its base's size and its result's.
			d := bufio.NewReader(lr)
			// The base's size: --fix-thin reads a base the host has in
			// whole, so it is capped like the result.
			base, err := binary.ReadUvarint(d)
			if err != nil {
				return unsafe("", "pack object %d: bad delta", i)
			}
			if base > uint64(lim.MaxBlobBytes) {
				return fmt.Errorf("%w: pack object %d builds on an object of %d bytes, over the cap of %d", ErrLimitExceeded, i, base, lim.MaxBlobBytes)
			}
			res, err := binary.ReadUvarint(d)
			if err != nil {
				return unsafe("", "pack object %d: bad delta", i)
			}
			if res > uint64(lim.MaxBlobBytes) {
				return fmt.Errorf("%w: pack object %d makes an object of %d bytes, over the cap of %d", ErrLimitExceeded, i, res, lim.MaxBlobBytes)
			}
			if expanded += int64(res); expanded > lim.MaxExpandedBytes {
				return fmt.Errorf("%w: the changes expand past %d bytes", ErrLimitExceeded, lim.MaxExpandedBytes)
			}
			data = d
		}
		if _, err := io.Copy(io.Discard, data); err != nil {
			return unsafe("", "pack object %d: %v", i, err)
		}
		// The copy ended at the stream's end (its checksum checked), or
		// one byte past the declared size.
		if got := size + 1 - lr.N; got != size {
			return unsafe("", "pack object %d inflates to %d bytes, not its declared %d", i, got, size)
		}
	}
	return nil
}
