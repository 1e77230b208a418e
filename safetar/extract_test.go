//go:build linux

package safetar

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type tcase struct {
	name string
	tar  []byte
	top  string // default "top"
	lim  Limits
	err  error // sentinel the error must wrap; nil: success
	// want, when non-nil, is the exact destination tree (see sandbox.tree).
	want map[string]string
	// skipped lists the entry names expected in Report.Skipped (in order).
	skipped []string
	check   func(t *testing.T, s *sandbox, rep Report)
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

// cases is the hostile-archive catalogue (go-engineering.md §C5), numbered
// after the checklist items.
func cases() []tcase {
	ok := E{Name: "top/ok", Body: "fine"}
	return []tcase{
		// Baseline.
		{name: "plain tree", tar: archive(E{Name: "top/", Type: '5'}, E{Name: "top/a.txt", Body: "A"},
			E{Name: "top/sub/", Type: '5'}, E{Name: "top/sub/run.sh", Body: "#!/bin/sh\n", Mode: 0o755}),
			want: map[string]string{"top/": "", "top/a.txt": "A", "top/sub/": "", "top/sub/run.sh": "#!/bin/sh\n"},
			check: func(t *testing.T, s *sandbox, r Report) {
				wantMode(t, s, "top/sub/run.sh", 0o755)
				wantMode(t, s, "top/a.txt", 0o644)
				if r.Files != 2 || r.Dirs != 2 || r.Bytes != 11 {
					t.Errorf("report %+v", r)
				}
			}},
		{name: "single file request", top: "qs.py", tar: archive(E{Name: "qs.py", Body: "print(1)"}),
			want: map[string]string{"qs.py": "print(1)"}},
		{name: "dot-slash prefix cleaned", tar: archive(E{Name: "./top/", Type: '5'}, E{Name: "././top/a", Body: "x"}),
			want: map[string]string{"top/": "", "top/a": "x"}},
		{name: "implicit parents", tar: archive(E{Name: "top/a/b/c", Body: "x"}, E{Name: "top/a/", Type: '5'}),
			want: map[string]string{"top/": "", "top/a/": "", "top/a/b/": "", "top/a/b/c": "x"}},
		{name: "trailing garbage after end blocks ignored", tar: append(archive(ok), []byte("GARBAGE after the end")...),
			want: map[string]string{"top/": "", "top/ok": "fine"}},

		// 1. Traversal.
		{name: "1 ../evil", tar: archive(E{Name: "../evil", Body: "x"}), err: ErrUnsafe},
		{name: "1 top/../../evil", tar: archive(ok, E{Name: "top/../../evil", Body: "x"}), err: ErrUnsafe},
		{name: "1 ./../evil", tar: archive(E{Name: "./../evil", Body: "x"}), err: ErrUnsafe},
		{name: "1 .. alone dir", tar: archive(E{Name: "..", Type: '5'}), err: ErrUnsafe},
		{name: "1 ../ alone", tar: archive(E{Name: "../", Type: '5'}), err: ErrUnsafe},
		{name: "1 inner .. that stays inside", tar: archive(E{Name: "top/a/../b", Body: "x"}), err: ErrUnsafe},
		{name: "1 top/.. dir", tar: archive(E{Name: "top/..", Type: '5'}), err: ErrUnsafe},
		// 2. Absolute and backslash.
		{name: "2 /etc/passwd", tar: archive(E{Name: "/etc/passwd", Body: "root::0:0"}), err: ErrUnsafe},
		{name: "2 //etc/passwd", tar: archive(E{Name: "//etc/passwd", Body: "x"}), err: ErrUnsafe},
		{name: "2 /top/x", tar: archive(E{Name: "/top/x", Body: "x"}), err: ErrUnsafe},
		{name: "2 backslash traversal", tar: archive(E{Name: `top\..\..\evil`, Body: "x"}), err: ErrUnsafe},
		{name: "2 backslash inside top", tar: archive(E{Name: `top/a\..\..\..\evil`, Body: "x"}), err: ErrUnsafe},
		{name: "2 drive letter", tar: archive(E{Name: `C:\evil`, Body: "x"}), err: ErrUnsafe},
		{name: "2 UNC", tar: archive(E{Name: `\\server\share\x`, Body: "x"}), err: ErrUnsafe},
		// 3. Empty, dot, trailing slash, long.
		{name: "3 empty name", tar: archive(E{Name: "", Body: "x"}), err: ErrUnsafe},
		{name: "3 dot", tar: archive(E{Name: ".", Type: '5'}), err: ErrUnsafe},
		{name: "3 dot-slash", tar: archive(E{Name: "./", Type: '5'}), err: ErrUnsafe},
		{name: "3 dot component", tar: archive(E{Name: "top/./a", Body: "x"}), err: ErrUnsafe},
		{name: "3 empty component", tar: archive(E{Name: "top//a", Body: "x"}), err: ErrUnsafe},
		{name: "3 trailing slash on file", tar: archive(E{Name: "top/", Type: '5'}, E{Name: "top/f/", Body: "x"}), err: ErrUnsafe},
		{name: "3 name over 4096 bytes", tar: archive(E{Name: "top/" + rep("a/", 2100) + "f", Body: "x"}), err: ErrUnsafe,
			lim: Limits{MaxDepth: 10000}},
		{name: "3 component over 255 bytes", tar: archive(E{Name: "top/" + rep("a", 256), Body: "x"}), err: ErrUnsafe},
		// archive/tar itself refuses NUL in PAX records.
		{name: "3 NUL in PAX path", tar: archive(E{Name: "top/a", Body: "x", PAX: []string{"path", "top/a\x00/../../evil"}}), err: ErrTruncated},
		// 4. Depth.
		{name: "4 depth at limit", lim: Limits{MaxDepth: 4}, tar: archive(E{Name: "top/a/b/c", Body: "x"}),
			want: map[string]string{"top/": "", "top/a/": "", "top/a/b/": "", "top/a/b/c": "x"}},
		{name: "4 depth over limit", lim: Limits{MaxDepth: 4}, tar: archive(E{Name: "top/a/b/c/d", Body: "x"}), err: ErrLimit},
		{name: "4 deep single entry default limit", tar: archive(E{Name: "top/" + rep("d/", 64) + "f", Body: "x"}), err: ErrLimit},
		{name: "4 nested dirs default limit", tar: archive(nestedDirs(70)...), err: ErrLimit},
		// 5. Top-level name.
		{name: "5 other top", tar: archive(E{Name: "other/x", Body: "x"}), err: ErrUnsafe},
		{name: "5 prefix collision dir/dir2", top: "dir", tar: archive(E{Name: "dir/", Type: '5'}, E{Name: "dir2/file", Body: "x"}), err: ErrUnsafe},
		{name: "5 prefix collision bare", top: "dir", tar: archive(E{Name: "dirx", Body: "x"}), err: ErrUnsafe},
		{name: "5 case differs from top", tar: archive(E{Name: "TOP/x", Body: "x"}), err: ErrUnsafe},
		{name: "5 file top then child", top: "qs.py", tar: archive(E{Name: "qs.py", Body: "x"}, E{Name: "qs.py/x", Body: "y"}), err: ErrUnsafe},
		// 6. PAX and GNU overrides.
		{name: "6 PAX path ../evil", tar: archive(E{Name: "top/benign", Body: "x", PAX: []string{"path", "../evil"}}), err: ErrUnsafe},
		{name: "6 PAX path absolute", tar: archive(E{Name: "top/benign", Body: "x", PAX: []string{"path", "/tmp/evil"}}), err: ErrUnsafe},
		{name: "6 PAX path deep traversal", tar: archive(E{Name: "top/" + rep("a/", 60) + rep("../", 70) + "evil", Body: "x"}), err: ErrUnsafe},
		{name: "6 GNU long name traversal", tar: archive(E{Name: "top/" + rep("a/", 60) + rep("../", 70) + "evil", Body: "x", GNULong: true}), err: ErrUnsafe},
		{name: "6 GNU long name fine", tar: archive(E{Name: "top/" + rep("a", 200), Body: "x", GNULong: true}),
			want: map[string]string{"top/": "", "top/" + rep("a", 200): "x"}},
		{name: "6 PAX linkpath traversal", tar: archive(ok, E{Name: "top/l", Type: '1', Link: "top/ok", PAX: []string{"linkpath", "../../etc/passwd"}}),
			skipped: []string{"top/l"}, want: map[string]string{"top/": "", "top/ok": "fine"}},
		// 7. Case and Unicode.
		{name: "7 case twins files", tar: archive(E{Name: "top/a.txt", Body: "1"}, E{Name: "top/A.TXT", Body: "2"}), err: ErrUnsafe},
		{name: "7 FOO dir, foo symlink, FOO/x", tar: archive(E{Name: "top/FOO/", Type: '5'}, E{Name: "top/foo", Type: '2', Link: "/etc"},
			E{Name: "top/FOO/x", Body: "x"}), err: ErrUnsafe},
		{name: "7 case twin parents", tar: archive(E{Name: "top/Dir/a", Body: "1"}, E{Name: "top/dir/b", Body: "2"}), err: ErrUnsafe},
		{name: "7 unicode simple fold (long s)", tar: archive(E{Name: "top/s", Body: "1"}, E{Name: "top/\u017f", Body: "2"}), err: ErrUnsafe},
		{name: "7 unicode simple fold (kelvin)", tar: archive(E{Name: "top/k", Body: "1"}, E{Name: "top/\u212a", Body: "2"}), err: ErrUnsafe},
		{name: "7 NFC vs NFD twins (documented limit: distinct on Linux)",
			tar:  archive(E{Name: "top/\u00e9", Body: "1"}, E{Name: "top/e\u0301", Body: "2"}),
			want: map[string]string{"top/": "", "top/\u00e9": "1", "top/e\u0301": "2"}},
		{name: "7 invalid UTF-8 names stay distinct", tar: archive(E{Name: "top/\xff", Body: "1"}, E{Name: "top/\xfe", Body: "2"}),
			want: map[string]string{"top/": "", "top/\xff": "1", "top/\xfe": "2"}},

		// 8-12. Symlinks.
		{name: "8 symlink to .. then write through", tar: archive(E{Name: "top/link", Type: '2', Link: ".."}, E{Name: "top/link/x", Body: "x"}), err: ErrUnsafe},
		{name: "8 symlink to ../outside then write through", tar: archive(E{Name: "top/link", Type: '2', Link: "../../outside"},
			E{Name: "top/link/x", Body: "x"}), err: ErrUnsafe},
		{name: "8 symlink to /etc then write through", tar: archive(E{Name: "top/link", Type: '2', Link: "/etc"}, E{Name: "top/link/passwd", Body: "x"}), err: ErrUnsafe},
		{name: "8 symlinks only: skipped", tar: archive(E{Name: "top/", Type: '5'}, E{Name: "top/up", Type: '2', Link: ".."},
			E{Name: "top/out", Type: '2', Link: "../../outside"}, E{Name: "top/etc", Type: '2', Link: "/etc"}),
			skipped: []string{"top/up", "top/out", "top/etc"}, want: map[string]string{"top/": ""}},
		{name: "8 top itself is a symlink", tar: archive(E{Name: "top", Type: '2', Link: "/"}, E{Name: "top/x", Body: "x"}), err: ErrUnsafe},
		{name: "9 symlink chain", tar: archive(E{Name: "top/a", Type: '2', Link: "b"}, E{Name: "top/b", Type: '2', Link: "../../"},
			E{Name: "top/a/x", Body: "x"}), err: ErrUnsafe},
		{name: "10 dangling symlink then file of same name", tar: archive(E{Name: "top/new", Type: '2', Link: "../../outside/new"},
			E{Name: "top/new", Body: "x"}), err: ErrUnsafe,
			check: func(t *testing.T, s *sandbox, _ Report) { mustNotExist(t, filepath.Join(s.parent, "outside", "new")) }},
		{name: "11 directory replaced by symlink then write", tar: archive(E{Name: "top/d/", Type: '5'}, E{Name: "top/d", Type: '2', Link: "../../outside"},
			E{Name: "top/d/x", Body: "x"}), err: ErrUnsafe},
		{name: "12 absolute symlink skipped, not created", tar: archive(E{Name: "top/cfg", Type: '2', Link: "/home/user/.ssh/id_rsa"}, ok),
			skipped: []string{"top/cfg"}, want: map[string]string{"top/": "", "top/ok": "fine"}},

		// 13-15. Hardlinks.
		{name: "13 hardlinks escaping: skipped", tar: archive(ok,
			E{Name: "top/h1", Type: '1', Link: "../../etc/passwd"},
			E{Name: "top/h2", Type: '1', Link: "/etc/passwd"},
			E{Name: "top/h3", Type: '1', Link: "/../etc/passwd"},
			E{Name: "top/h4", Type: '1', Link: "top/../../outside/canary"},
			E{Name: "top/h5", Type: '1', Link: "outside/canary"},
			E{Name: "top/link", Type: '2', Link: "/etc"},
			E{Name: "top/h6", Type: '1', Link: "top/link/passwd"},
			E{Name: "top/h7", Type: '1', Link: "top/" + rep("x", 5000)}),
			skipped: []string{"top/h1", "top/h2", "top/h3", "top/h4", "top/h5", "top/link", "top/h6", "top/h7"},
			want:    map[string]string{"top/": "", "top/ok": "fine"}},
		{name: "13 write through skipped hardlink name", tar: archive(E{Name: "top/h", Type: '1', Link: "/etc/passwd"}, E{Name: "top/h", Body: "pwned"}), err: ErrUnsafe},
		{name: "14 hardlink to later entry, dir, symlink, itself: skipped", tar: archive(
			E{Name: "top/d/", Type: '5'},
			E{Name: "top/s", Type: '2', Link: "/etc/passwd"},
			E{Name: "top/early", Type: '1', Link: "top/late"},
			E{Name: "top/todir", Type: '1', Link: "top/d"},
			E{Name: "top/todir2", Type: '1', Link: "top/d/"},
			E{Name: "top/tosym", Type: '1', Link: "top/s"},
			E{Name: "top/self", Type: '1', Link: "top/self"},
			E{Name: "top/late", Body: "late"}),
			skipped: []string{"top/s", "top/early", "top/todir", "top/todir2", "top/tosym", "top/self"},
			want:    map[string]string{"top/": "", "top/d/": "", "top/late": "late"}},
		{name: "15 in-tree hardlink copied", tar: archive(E{Name: "top/a", Body: "hello", Mode: 0o4755},
			E{Name: "top/sub/b", Type: '1', Link: "top/a"}, E{Name: "top/c", Type: '1', Link: "./top/a"}),
			want: map[string]string{"top/": "", "top/a": "hello", "top/sub/": "", "top/sub/b": "hello", "top/c": "hello"},
			check: func(t *testing.T, s *sandbox, r Report) {
				a, b := statT(t, s, "top/a"), statT(t, s, "top/sub/b")
				if a.Ino == b.Ino || a.Nlink != 1 || b.Nlink != 1 {
					t.Errorf("hardlink not materialised as a copy: ino %d/%d nlink %d/%d", a.Ino, b.Ino, a.Nlink, b.Nlink)
				}
				wantMode(t, s, "top/sub/b", 0o755)
				if err := os.WriteFile(filepath.Join(s.dst, "top/sub/b"), []byte("changed"), 0o644); err != nil {
					t.Fatal(err)
				}
				if got, _ := os.ReadFile(filepath.Join(s.dst, "top/a")); string(got) != "hello" {
					t.Errorf("write through the copy changed the target: %q", got)
				}
				if r.Files != 3 || r.Bytes != 15 {
					t.Errorf("report %+v", r)
				}
			}},
		{name: "15 hardlink name collides with its target", tar: archive(E{Name: "top/a", Body: "x"}, E{Name: "top/a", Type: '1', Link: "top/a"}), err: ErrUnsafe},
		{name: "15 hardlink copy counts toward MaxBytes", lim: Limits{MaxBytes: 100},
			tar: archive(E{Name: "top/a", Body: rep("x", 60)}, E{Name: "top/b", Type: '1', Link: "top/a"}), err: ErrLimit},

		// 16. Special types.
		{name: "16 devices fifo cont unknown sparse: skipped", tar: concat(
			E{Name: "top/", Type: '5'}.bytes(),
			E{Name: "top/sda", Type: '4'}.bytes(),
			E{Name: "top/tty", Type: '3'}.bytes(),
			E{Name: "top/fifo", Type: '6'}.bytes(),
			E{Name: "top/cont", Type: '7', Body: "contiguous"}.bytes(),
			E{Name: "top/unk", Type: 'Z', Body: "whatever"}.bytes(),
			E{Name: "top/dump", Type: 'D'}.bytes(),
			E{Name: "top/vol", Type: 'V'}.bytes(),
			gnuSparse("top/sparse", "data", 100e9),
			E{Name: "top/paxsparse", Body: "data", PAX: []string{"GNU.sparse.major", "0", "GNU.sparse.minor", "1",
				"GNU.sparse.size", "100000000000", "GNU.sparse.numblocks", "1", "GNU.sparse.map", "0,4"}}.bytes(),
			E{Name: "top/ok", Body: "fine"}.bytes(),
			make([]byte, 1024)),
			skipped: []string{"top/sda", "top/tty", "top/fifo", "top/cont", "top/unk", "top/dump", "top/vol", "top/sparse", "top/paxsparse"},
			want:    map[string]string{"top/": "", "top/ok": "fine"}},

		// 17-18. Metadata.
		{name: "17 setuid setgid sticky stripped, mode 0000 dir writable", tar: archive(
			E{Name: "top/", Type: '5', Mode: 0o1777},
			E{Name: "top/locked/", Type: '5', Mode: 0o000 | 0o7000},
			E{Name: "top/locked/suid", Body: "x", Mode: 0o4755},
			E{Name: "top/locked/sgid", Body: "x", Mode: 0o2644},
			E{Name: "top/locked/none", Body: "x", Mode: 0o000}),
			want: map[string]string{"top/": "", "top/locked/": "", "top/locked/suid": "x", "top/locked/sgid": "x", "top/locked/none": "x"},
			check: func(t *testing.T, s *sandbox, _ Report) {
				wantMode(t, s, "top/locked/suid", 0o755)
				wantMode(t, s, "top/locked/sgid", 0o644)
				wantMode(t, s, "top/locked/none", 0o644)
				wantMode(t, s, "top/locked", os.ModeDir|0o755)
			}},
		{name: "18 uid 0, huge uid, xattrs, odd mtimes", tar: archive(
			E{Name: "top/root", Body: "x", UID: 0},
			E{Name: "top/huge", Body: "x", UID: 1 << 40},
			E{Name: "top/cap", Body: "x", PAX: []string{"SCHILY.xattr.security.capability", "\x01\x00\x00\x02", "SCHILY.xattr.user.x", "y"}},
			E{Name: "top/old", Body: "x", PAX: []string{"mtime", "-62135596800"}},
			E{Name: "top/future", Body: "x", PAX: []string{"mtime", "253402300799"}},
			E{Name: "top/sane", Body: "x", MTime: 1600000000}),
			want: map[string]string{"top/": "", "top/root": "x", "top/huge": "x", "top/cap": "x", "top/old": "x", "top/future": "x", "top/sane": "x"},
			check: func(t *testing.T, s *sandbox, _ Report) {
				for _, n := range []string{"top/old", "top/future"} {
					if mt := modTime(t, s, n); mt.Year() < 2000 || mt.After(time.Now().Add(time.Hour)) {
						t.Errorf("%s: absurd mtime applied: %v", n, mt)
					}
				}
				if mt := modTime(t, s, "top/sane"); mt.Unix() != 1600000000 {
					t.Errorf("sane mtime not applied: %v", mt)
				}
				if st := statT(t, s, "top/huge"); int(st.Uid) != os.Getuid() {
					t.Errorf("uid %d applied", st.Uid)
				}
			}},

		// 19-22. Resource limits.
		{name: "19 size header over cap rejected before reading body", lim: Limits{MaxBytes: 1 << 20},
			// No body follows: if Extract tried to read it, it would get a truncation error instead.
			tar: archiveNoEnd(E{Name: "top/big", Size: 1 << 40}), err: ErrLimit},
		{name: "19 size header over default cap", tar: archiveNoEnd(E{Name: "top/big", Size: 2 << 30}), err: ErrLimit},
		{name: "20 total over cap", lim: Limits{MaxBytes: 100}, tar: archive(E{Name: "top/a", Body: rep("a", 40)},
			E{Name: "top/b", Body: rep("b", 40)}, E{Name: "top/c", Body: rep("c", 40)}), err: ErrLimit},
		{name: "20 total exactly at cap", lim: Limits{MaxBytes: 80}, tar: archive(E{Name: "top/a", Body: rep("a", 40)},
			E{Name: "top/b", Body: rep("b", 40)}), want: map[string]string{"top/": "", "top/a": rep("a", 40), "top/b": rep("b", 40)}},
		{name: "21 entries over cap", lim: Limits{MaxEntries: 1000}, tar: archive(manyFiles(1001)...), err: ErrLimit},
		{name: "21 entries at cap", lim: Limits{MaxEntries: 1000}, tar: archive(manyFiles(999)...),
			check: func(t *testing.T, s *sandbox, r Report) {
				if r.Files != 999 || r.Dirs != 1 {
					t.Errorf("report %+v", r)
				}
			}},
		{name: "21 implicit dirs count as entries", lim: Limits{MaxEntries: 5}, tar: archive(E{Name: "top/a/b/c/d/e/f", Body: "x"}), err: ErrLimit},
		{name: "21 PAX global headers count as entries", lim: Limits{MaxEntries: 3}, tar: archive(
			E{Name: "g", Type: 'g', Body: paxRecord("comment", "x")}, E{Name: "g", Type: 'g', Body: paxRecord("comment", "x")},
			E{Name: "g", Type: 'g', Body: paxRecord("comment", "x")}, E{Name: "g", Type: 'g', Body: paxRecord("comment", "x")}), err: ErrLimit},
		{name: "21 only a PAX global header is empty", tar: archive(E{Name: "g", Type: 'g', Body: paxRecord("comment", "x")}), err: ErrTruncated},
		{name: "21 raw stream cap bounds skipped bodies", lim: Limits{MaxBytes: 1024, MaxEntries: 2},
			tar: archive(E{Name: "top/unk", Type: 'Z', Body: rep("z", 64<<10)}), err: ErrLimit},

		// 24-25. Stream integrity.
		{name: "24 truncated mid-header", tar: archive(ok, E{Name: "top/b", Body: "x"})[:512*2+300], err: ErrTruncated},
		{name: "24 truncated mid-body", tar: archive(E{Name: "top/b", Body: rep("x", 2000)})[:512+1000], err: ErrTruncated},
		{name: "24 truncated at entry boundary", tar: archiveNoEnd(ok, E{Name: "top/b", Body: "x"}), err: ErrTruncated},
		{name: "24 truncated after one end block", tar: archive(ok)[:512*2+512], err: ErrTruncated},
		{name: "24 truncated inside PAX record", tar: E{Name: "top/" + rep("p", 200), Body: "x"}.bytes()[:600], err: ErrTruncated},
		{name: "25 garbage", tar: []byte("this is not a tar stream at all, just some text\n"), err: ErrTruncated},
		{name: "25 garbage block", tar: bytes.Repeat([]byte{0xA5}, 4096), err: ErrTruncated},
		{name: "25 bad checksum", tar: func() []byte { b := archive(ok); b[0] = 'X'; return b }(), err: ErrTruncated},
		{name: "25 empty stream", tar: nil, err: ErrTruncated},
		{name: "25 only end blocks", tar: make([]byte, 10240), err: ErrTruncated},
		{name: "25 negative size", tar: func() []byte {
			b := archive(ok)
			copy(b[124:136], "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
			checksum(b[:512])
			return b
		}(), err: ErrTruncated},

		// 26. Absurd link target.
		{name: "26 absurd hardlink target", tar: archive(E{Name: "top/h", Type: '1', Link: rep("../", 3000)}),
			skipped: []string{"top/h"}, want: map[string]string{"top/": ""}},

		// 27. Duplicates.
		{name: "27 file twice", tar: archive(E{Name: "top/a", Body: "1"}, E{Name: "top/a", Body: "2"}), err: ErrUnsafe},
		{name: "27 dir then file", tar: archive(E{Name: "top/a/", Type: '5'}, E{Name: "top/a", Body: "2"}), err: ErrUnsafe},
		{name: "27 file then dir", tar: archive(E{Name: "top/a", Body: "1"}, E{Name: "top/a/", Type: '5'}), err: ErrUnsafe},
		{name: "27 file then child", tar: archive(E{Name: "top/a", Body: "1"}, E{Name: "top/a/b", Body: "2"}), err: ErrUnsafe},
		{name: "27 explicit dir twice", tar: archive(E{Name: "top/", Type: '5'}, E{Name: "top/", Type: '5'}), err: ErrUnsafe},
		{name: "27 dir with and without slash", tar: archive(E{Name: "top/d/", Type: '5'}, E{Name: "top/d", Type: '5'}), err: ErrUnsafe},
		{name: "27 top file twice", top: "f", tar: archive(E{Name: "f", Body: "1"}, E{Name: "./f", Body: "2"}), err: ErrUnsafe},
		{name: "27 implicit dir then explicit dir is fine", tar: archive(E{Name: "top/a/b", Body: "1"}, E{Name: "top/a/", Type: '5'}, E{Name: "top/", Type: '5'}),
			want: map[string]string{"top/": "", "top/a/": "", "top/a/b": "1"}},
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func nestedDirs(n int) []E {
	var es []E
	name := "top/"
	for i := 0; i < n; i++ {
		es = append(es, E{Name: name, Type: '5'})
		name += "d/"
	}
	return es
}

func manyFiles(n int) []E {
	es := []E{{Name: "top/", Type: '5'}}
	for i := 0; i < n; i++ {
		es = append(es, E{Name: "top/f" + strconv.Itoa(i)})
	}
	return es
}

func statT(t *testing.T, s *sandbox, rel string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(s.dst, rel))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func modTime(t *testing.T, s *sandbox, rel string) time.Time {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(s.dst, rel))
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

func wantMode(t *testing.T, s *sandbox, rel string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(s.dst, rel))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != want {
		t.Errorf("%s: mode %v, want %v", rel, fi.Mode(), want)
	}
}

func mustNotExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (err %v)", p, err)
	}
}

func TestExtract(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			top := tc.top
			if top == "" {
				top = "top"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := Extract(ctx, bytes.NewReader(tc.tar), s.dst, top, tc.lim)
			s.check(t)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
			} else {
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, tc.err) {
					t.Fatalf("error %v (%T), want *Error wrapping %v", err, err, tc.err)
				}
				t.Logf("rejected: %v", err)
			}
			if tc.want != nil {
				got := s.tree(t)
				if !equalMaps(got, tc.want) {
					t.Errorf("tree:\n got %q\nwant %q", got, tc.want)
				}
			}
			if tc.skipped != nil {
				var names []string
				for _, sk := range r.Skipped {
					names = append(names, sk.Name)
					if sk.Reason == "" {
						t.Errorf("%s: empty skip reason", sk.Name)
					}
				}
				if strings.Join(names, "|") != strings.Join(tc.skipped, "|") {
					t.Errorf("skipped %q, want %q", r.Skipped, tc.skipped)
				}
			}
			if tc.check != nil {
				tc.check(t, s, r)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
