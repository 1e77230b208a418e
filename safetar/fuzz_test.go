//go:build linux

package safetar

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// FuzzExtract feeds arbitrary streams to Extract. Invariants: no panic,
// nothing outside the destination changes, the destination holds only
// regular files (0644/0755) and directories (0755), and errors are *Error.
func FuzzExtract(f *testing.F) {
	for _, tc := range cases() {
		// Big seeds (the 1000-entry ones) make mutation and minimisation
		// crawl; smaller versions of them are added below.
		if len(tc.tar) <= 16<<10 {
			f.Add(tc.tar)
		}
	}
	f.Add(archive(nestedDirs(20)...))
	f.Add(archive(manyFiles(30)...))
	f.Add(archive(E{Name: "top/a", Body: "hello"}, E{Name: "top/b", Type: '1', Link: "top/a"},
		E{Name: "top/l", Type: '2', Link: "../.."}, E{Name: "top/d/", Type: '5'}, E{Name: "top/d/e", Body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 256<<10 {
			t.Skip("input too large to be useful")
		}
		s := newSandbox(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rep, err := Extract(ctx, bytes.NewReader(data), s.dst, "top", Limits{MaxBytes: 1 << 20, MaxEntries: 200, MaxDepth: 16})
		s.check(t)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if rep.Bytes > 1<<20 || rep.Files+rep.Dirs > 200 {
			t.Fatalf("limits exceeded: %+v", rep)
		}
	})
}
