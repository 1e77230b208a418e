//go:build linux

package safetar

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// E is one archive entry for the raw builder. The builder writes tar blocks by
// hand so tests can produce anything an attacker could: PAX overrides, GNU
// long names, bad sizes, odd typeflags.
type E struct {
	Name    string
	Type    byte // default '0'
	Body    string
	Size    int64 // header size; 0 means len(Body)
	Link    string
	Mode    int64 // default 0644 (0755 for directories)
	UID     int64
	MTime   int64
	PAX     []string // key, value pairs for a preceding 'x' record
	GNULong bool     // carry a long name/link in GNU 'L'/'K' records instead of PAX
}

func putNum(b []byte, v int64) {
	s := fmt.Sprintf("%o", v)
	if v >= 0 && len(s) <= len(b)-1 {
		copy(b, fmt.Sprintf("%0*o", len(b)-1, v))
		b[len(b)-1] = 0
		return
	}
	// base-256
	for i := range b {
		b[i] = 0
	}
	var tmp [8]byte
	binary.BigEndian.PutUint64(tmp[:], uint64(v))
	copy(b[len(b)-8:], tmp[:])
	b[0] |= 0x80
}

func block(name string, typ byte, size int64, link string, mode, uid, mtime int64, gnu bool) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	putNum(b[100:108], mode)
	putNum(b[108:116], uid)
	putNum(b[116:124], uid)
	putNum(b[124:136], size)
	putNum(b[136:148], mtime)
	b[156] = typ
	copy(b[157:257], link)
	if gnu {
		copy(b[257:265], "ustar  \x00")
	} else {
		copy(b[257:265], "ustar\x0000")
	}
	checksum(b)
	return b
}

func checksum(b []byte) {
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	o := strconv.FormatInt(sum, 8)
	copy(b[148:156], strings.Repeat("0", 6-len(o))+o+"\x00 ")
}

func padded(body []byte) []byte {
	out := append([]byte{}, body...)
	if r := len(out) % 512; r != 0 {
		out = append(out, make([]byte, 512-r)...)
	}
	return out
}

func paxRecord(k, v string) string {
	rec := " " + k + "=" + v + "\n"
	n := len(rec) + 1
	for len(fmt.Sprint(n))+len(rec) != n {
		n++
	}
	return fmt.Sprint(n) + rec
}

func (e E) bytes() []byte {
	var out bytes.Buffer
	typ := e.Type
	if typ == 0 {
		typ = '0'
	}
	mode := e.Mode
	if mode == 0 {
		mode = 0o644
		if typ == '5' {
			mode = 0o755
		}
	}
	size := e.Size
	if size == 0 {
		size = int64(len(e.Body))
	}
	name, link := e.Name, e.Link
	pax := append([]string{}, e.PAX...)
	if len(name) > 100 {
		if e.GNULong {
			out.Write(block("././@LongLink", 'L', int64(len(name)+1), "", 0, 0, 0, true))
			out.Write(padded([]byte(name + "\x00")))
		} else {
			pax = append(pax, "path", name)
		}
		name = name[:100]
	}
	if len(link) > 100 {
		if e.GNULong {
			out.Write(block("././@LongLink", 'K', int64(len(link)+1), "", 0, 0, 0, true))
			out.Write(padded([]byte(link + "\x00")))
		} else {
			pax = append(pax, "linkpath", link)
		}
		link = link[:100]
	}
	if len(pax) > 0 {
		var recs strings.Builder
		for i := 0; i+1 < len(pax); i += 2 {
			recs.WriteString(paxRecord(pax[i], pax[i+1]))
		}
		out.Write(block("PaxHeaders/x", 'x', int64(recs.Len()), "", 0o644, 0, 0, false))
		out.Write(padded([]byte(recs.String())))
	}
	out.Write(block(name, typ, size, link, mode, e.UID, e.MTime, e.GNULong))
	out.Write(padded([]byte(e.Body)))
	return out.Bytes()
}

// archive builds a tar with end-of-archive blocks.
func archive(ents ...E) []byte {
	return append(archiveNoEnd(ents...), make([]byte, 1024)...)
}

// archiveNoEnd builds a tar without end-of-archive blocks.
func archiveNoEnd(ents ...E) []byte {
	var out bytes.Buffer
	for _, e := range ents {
		out.Write(e.bytes())
	}
	return out.Bytes()
}

// gnuSparse builds an old-GNU sparse entry ('S') with one data chunk of
// len(data) bytes at offset 0 and the given logical size.
func gnuSparse(name string, data string, logical int64) []byte {
	b := block(name, 'S', int64(len(data)), "", 0o644, 0, 0, true)
	putNum(b[386:398], 0)
	putNum(b[398:410], int64(len(data)))
	putNum(b[483:495], logical)
	checksum(b)
	return append(b, padded([]byte(data))...)
}

// sandbox is a parent directory holding the destination and a sibling
// "outside" directory with a canary; check verifies nothing outside the
// destination changed and the destination only holds policy-conforming
// files.
type sandbox struct {
	parent, dst string
	before      map[string]string
}

const canaryContent = "canary: must never change"

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	parent := t.TempDir()
	s := &sandbox{parent: parent, dst: filepath.Join(parent, "dst")}
	for _, d := range []string{s.dst, filepath.Join(parent, "outside")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(parent, "outside", "canary"), []byte(canaryContent), 0o644); err != nil {
		t.Fatal(err)
	}
	s.before = s.outsideState(t)
	return s
}

func describe(t testing.TB, p string, d fs.DirEntry) string {
	info, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	desc := info.Mode().String()
	if info.Mode().IsRegular() {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		desc += " " + string(b)
	}
	return desc
}

func (s *sandbox) outsideState(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(s.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == s.dst {
			m[p] = "dst"
			return fs.SkipDir
		}
		m[p] = describe(t, p, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// check asserts the invariants that hold whatever Extract returned.
func (s *sandbox) check(t testing.TB) {
	t.Helper()
	after := s.outsideState(t)
	for p, d := range after {
		if b, ok := s.before[p]; !ok || b != d {
			t.Errorf("outside the destination: %s is %q (before: %q, present %v)", p, d, b, ok)
		}
	}
	for p := range s.before {
		if _, ok := after[p]; !ok {
			t.Errorf("outside the destination: %s disappeared", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.parent, "outside", "canary")); err != nil || string(b) != canaryContent {
		t.Errorf("canary changed: %q, %v", b, err)
	}
	// Inside: only regular files 0644/0755 and directories 0755.
	err := filepath.WalkDir(s.dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := info.Mode()
		switch {
		case p == s.dst:
		case m.IsDir():
			if m != fs.ModeDir|0o755 {
				t.Errorf("%s: directory mode %v", p, m)
			}
		case m.IsRegular():
			if m != 0o644 && m != 0o755 {
				t.Errorf("%s: file mode %v", p, m)
			}
		default:
			t.Errorf("%s: unexpected file type %v", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tree lists the destination as "path" (dirs end in /) -> content.
func (s *sandbox) tree(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(s.dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.dst {
			return err
		}
		rel, _ := filepath.Rel(s.dst, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			m[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
