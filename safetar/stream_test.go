//go:build linux

package safetar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
)

// genReader produces an archive lazily: entry(i) for i in [0, n), then the
// end-of-archive blocks. It records how many entries were generated.
type genReader struct {
	entry func(i int) []byte
	n, i  int
	buf   []byte
	ended bool
}

func (g *genReader) Read(p []byte) (int, error) {
	for len(g.buf) == 0 {
		switch {
		case g.i < g.n:
			g.buf = g.entry(g.i)
			g.i++
		case !g.ended:
			g.buf = make([]byte, 1024)
			g.ended = true
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	return n, nil
}

func extractIn(t *testing.T, ctx context.Context, r io.Reader, lim Limits) (*sandbox, Report, error) {
	t.Helper()
	s := newSandbox(t)
	rep, err := Extract(ctx, r, s.dst, "top", lim)
	s.check(t)
	return s, rep, err
}

func wantErr(t *testing.T, err, sentinel error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, sentinel) {
		t.Fatalf("error %v (%T), want *Error wrapping %v", err, err, sentinel)
	}
}

// §C5 item 4: 10,000 nested directories, streamed; Extract must stop at the
// depth limit without reading the rest.
func TestDeepNesting10000(t *testing.T) {
	name := "top/"
	g := &genReader{n: 10000, entry: func(i int) []byte {
		b := E{Name: name, Type: '5'}.bytes()
		name += "d/"
		return b
	}}
	_, _, err := extractIn(t, context.Background(), g, Limits{})
	wantErr(t, err, ErrLimit)
	if g.i > DefaultMaxDepth+100 {
		t.Errorf("generated %d entries before stopping", g.i)
	}
}

// §C5 item 21: a million headers against the entry cap (default 100000).
// Entries are FIFOs, so the run measures header handling, not disk.
func TestMillionEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	start := time.Now()
	tmpl := block("", '6', 0, "", 0o644, 0, 0, false)
	g := &genReader{n: 1_000_000, entry: func(i int) []byte {
		b := append([]byte(nil), tmpl...)
		copy(b, "top/f")
		copy(b[5:], strconv.Itoa(i))
		checksum(b)
		return b
	}}
	_, rep, err := extractIn(t, context.Background(), g, Limits{})
	wantErr(t, err, ErrLimit)
	if len(rep.Skipped) != maxSkippedListed || rep.SkippedOmitted != DefaultMaxEntries-1-maxSkippedListed {
		t.Errorf("skipped %d listed, %d omitted", len(rep.Skipped), rep.SkippedOmitted)
	}
	if g.i > DefaultMaxEntries+100 {
		t.Errorf("read %d entries", g.i)
	}
	t.Logf("%d headers in %v", g.i, time.Since(start))
}

// slowReader hands out one byte per tick.
type slowReader struct {
	data []byte
	tick time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.tick)
	p[0] = s.data[0]
	s.data = s.data[1:]
	return 1, nil
}

// blockingReader returns data, then blocks until released.
type blockingReader struct {
	data    []byte
	release chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	<-b.release
	return 0, io.ErrClosedPipe
}

// §C5 item 23: slow streams must stop at the ctx deadline, whether slow in
// headers or in a body, and even if Read blocks forever.
func TestSlowStreamDeadline(t *testing.T) {
	body := archive(E{Name: "top/a", Body: strings.Repeat("x", 100_000)})
	tests := []struct {
		name string
		r    func(t *testing.T) io.Reader
	}{
		{"trickle from the start", func(*testing.T) io.Reader { return &slowReader{data: body, tick: 10 * time.Millisecond} }},
		{"trickle in the body", func(*testing.T) io.Reader {
			return io.MultiReader(bytes.NewReader(body[:2000]), &slowReader{data: body[2000:], tick: 10 * time.Millisecond})
		}},
		{"blocks forever in the body", func(t *testing.T) io.Reader {
			b := &blockingReader{data: body[:3000], release: make(chan struct{})}
			t.Cleanup(func() { close(b.release) })
			return b
		}},
		{"blocks forever before any data", func(t *testing.T) io.Reader {
			b := &blockingReader{release: make(chan struct{})}
			t.Cleanup(func() { close(b.release) })
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			// A reader that blocks forever is left behind at the
			// deadline: Extract returns (the minute only guards against
			// it hanging, which it would until the reader's release).
			s, r := newSandbox(t), tt.r(t)
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, err = Extract(ctx, r, s.dst, "top", Limits{})
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("Extract did not return at the context's deadline")
			}
			s.check(t)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want DeadlineExceeded", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("not an *Error: %T", err)
			}
		})
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := extractIn(t, ctx, bytes.NewReader(archive(E{Name: "top/a", Body: "x"})), Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v", err)
	}
}

// errReader fails after its data with a non-EOF error (a reset connection).
type errReader struct{ data []byte }

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, errors.New("connection reset")
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func TestReaderError(t *testing.T) {
	b := archive(E{Name: "top/a", Body: strings.Repeat("x", 5000)})
	_, _, err := extractIn(t, context.Background(), &errReader{data: b[:3000]}, Limits{})
	wantErr(t, err, ErrTruncated)
	if !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("cause lost: %v", err)
	}
}

func TestDestinationChecks(t *testing.T) {
	tarb := archive(E{Name: "top/a", Body: "x"})
	t.Run("not empty", func(t *testing.T) {
		s := newSandbox(t)
		if err := os.WriteFile(filepath.Join(s.dst, "old"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Extract(context.Background(), bytes.NewReader(tarb), s.dst, "top", Limits{}); err == nil {
			t.Fatal("extracted into a non-empty directory")
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := Extract(context.Background(), bytes.NewReader(tarb), filepath.Join(t.TempDir(), "nope"), "top", Limits{}); err == nil {
			t.Fatal("no error")
		}
	})
	for _, top := range []string{"", ".", "..", "a/b", `a\b`, "/", "a\x00", strings.Repeat("a", 256)} {
		t.Run("bad top "+strconv.Quote(top), func(t *testing.T) {
			s := newSandbox(t)
			if _, err := Extract(context.Background(), bytes.NewReader(tarb), s.dst, top, Limits{}); err == nil {
				t.Fatal("no error")
			}
			s.check(t)
		})
	}
}

func TestSplitNameNUL(t *testing.T) {
	if _, _, reason := splitName("top/a\x00b"); reason == "" {
		t.Fatal("NUL accepted")
	}
}

// TestFoldKey checks foldKey agrees with strings.EqualFold on valid UTF-8.
// (On invalid UTF-8 EqualFold sees U+FFFD for every bad byte; foldKey keeps
// distinct bytes distinct, as the filesystem does.)
func TestFoldKey(t *testing.T) {
	var runes []rune
	for r := rune(0); r < 0x3000; r++ {
		if unicode.IsLetter(r) {
			runes = append(runes, r)
		}
	}
	runes = append(runes, 0x212A, 0x212B, 0x1E9E, 0xFF21, 0xFF41, 0x10400, 0x10428)
	for _, a := range runes {
		for f := unicode.SimpleFold(a); ; f = unicode.SimpleFold(f) {
			if foldKey(string(a)) != foldKey(string(f)) {
				t.Errorf("%U and %U fold equal but keys differ", a, f)
			}
			if f == a {
				break
			}
		}
	}
	pairs := [][2]string{{"abc", "ABC"}, {"straße", "STRASSE"}, {"ǅ", "ǆ"}, {"x", "y"}, {"ſ", "S"}}
	for _, p := range pairs {
		if got, want := foldKey(p[0]) == foldKey(p[1]), strings.EqualFold(p[0], p[1]); got != want {
			t.Errorf("%q vs %q: keys equal %v, EqualFold %v", p[0], p[1], got, want)
		}
	}
	if foldKey("a\xffb") == foldKey("a\xfeb") {
		t.Error("distinct invalid bytes share a key")
	}
}

// TestConcurrentExtracts runs several extractions at once (for -race).
func TestConcurrentExtracts(t *testing.T) {
	b := archive(E{Name: "top/a", Body: strings.Repeat("x", 100_000)}, E{Name: "top/b/c", Body: "y"})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		s := newSandbox(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Extract(context.Background(), bytes.NewReader(b), s.dst, "top", Limits{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
