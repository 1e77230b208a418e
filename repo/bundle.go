package repo

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
)

// bundleHeader is what a bundle says before its pack.
type bundleHeader struct {
	prereqs []string          // commits the receiver must have
	refs    map[string]string // ref name → object id
	objects uint32            // the pack's object count
	pack    int64             // the pack's offset in the file
}

// maxHeaderLines bounds a bundle's header (its prerequisites and refs):
// ours name one ref and a few prerequisites.
const maxHeaderLines = 1000

// readBundleHeader parses the header of a v2 or v3 bundle and the pack
// header after it, without git: a hostile bundle is refused before any
// git reads it.
func readBundleHeader(path string, hexLen int) (bundleHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return bundleHeader{}, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	h := bundleHeader{refs: map[string]string{}}
	line := func() (string, error) {
		s, err := r.ReadSlice('\n')
		h.pack += int64(len(s))
		if err == bufio.ErrBufferFull {
			return "", unsafe("", "bundle header line too long")
		}
		if err != nil {
			return "", unsafe("", "bundle header cut short")
		}
		return strings.TrimSuffix(string(s), "\n"), nil
	}
	first, err := line()
	if err != nil {
		return h, err
	}
	v3 := first == "# v3 git bundle"
	if !v3 && first != "# v2 git bundle" {
		return h, unsafe("", "not a git bundle (header %q)", clip(first))
	}
	for n := 0; ; n++ {
		if n > maxHeaderLines {
			return h, unsafe("", "bundle header over %d lines", maxHeaderLines)
		}
		s, err := line()
		if err != nil {
			return h, err
		}
		switch {
		case s == "":
			goto pack
		case v3 && strings.HasPrefix(s, "@"):
			if s != "@object-format=sha1" && s != "@object-format=sha256" {
				return h, unsafe("", "bundle capability %q", clip(s))
			}
		case strings.HasPrefix(s, "-"):
			oid, _, _ := strings.Cut(s[1:], " ")
			if !isOID(oid, hexLen) {
				return h, unsafe("", "bundle prerequisite %q", clip(s))
			}
			h.prereqs = append(h.prereqs, oid)
		default:
			oid, ref, ok := strings.Cut(s, " ")
			if !ok || !isOID(oid, hexLen) {
				return h, unsafe("", "bundle line %q", clip(s))
			}
			if _, dup := h.refs[ref]; dup {
				return h, unsafe("", "bundle names %q twice", clip(ref))
			}
			h.refs[ref] = oid
		}
	}
pack:
	var ph [12]byte
	if _, err := io.ReadFull(r, ph[:]); err != nil {
		return h, unsafe("", "bundle has no pack")
	}
	if string(ph[:4]) != "PACK" {
		return h, unsafe("", "bundle's pack has no PACK signature")
	}
	if v := binary.BigEndian.Uint32(ph[4:8]); v != 2 && v != 3 {
		return h, unsafe("", "pack version %d", v)
	}
	h.objects = binary.BigEndian.Uint32(ph[8:12])
	return h, nil
}

func isOID(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// clip shortens hostile text for an error message and makes it printable.
func clip(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)[1 : len(fmt.Sprintf("%q", s))-1]
}
