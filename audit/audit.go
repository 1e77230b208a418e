// Package audit writes the per-session audit trail as a session runs:
//
//	<root>/<YYYYMMDD>/<session_id>/
//	    events.jsonl   normalized events, one per line
//	    session.jsonl  the CLI's raw stdout, byte for byte (secrets redacted)
//	    status.json    metadata and every turn's result, rewritten atomically
//
// and, per agent, the audit of its network boundary:
//
//	<root>/<YYYYMMDD>/<sandbox name>/
//	    model.jsonl    one line per request through the model proxy
//	    egress.jsonl   one line per egress proxy decision
//
// Every turn of a session appends to the same folder, so tail -f works.
// Known secrets are replaced with [REDACTED] before anything is written.
// The package depends on nothing but the standard library: callers hand
// it raw lines and JSON-marshalable values.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
)

// Redacted replaces every secret in what is written.
const Redacted = "[REDACTED]"

// DateLayout names the date folders.
const DateLayout = "20060102"

// Log is one session's audit folder. Methods are safe for concurrent use.
type Log struct {
	dir     string
	secrets []string

	mu      sync.Mutex
	events  *os.File
	raw     *os.File
	written int64 // bytes in events.jsonl and session.jsonl, including what was there at Open
}

var safeID = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// FolderName turns a session id (which came out of a container: hostile)
// into a safe folder name: the id itself when it is plain, else a hash.
func FolderName(sessionID string) string {
	if safeID.MatchString(sessionID) && !strings.Contains(sessionID, "..") {
		return sessionID
	}
	sum := sha256.Sum256([]byte(sessionID))
	return "id-" + hex.EncodeToString(sum[:12])
}

// Open creates (or reopens, to append) the folder of a session started on
// date, under root.
func Open(root string, date time.Time, sessionID string, secrets []string) (*Log, error) {
	if root == "" {
		return nil, errors.New("audit: empty root")
	}
	dir := Folder(root, date, sessionID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l := &Log{dir: dir}
	for _, s := range secrets {
		if len(s) >= 4 { // shorter "secrets" would shred ordinary text
			l.secrets = append(l.secrets, s)
		}
	}
	var err error
	if l.events, err = openAppend(filepath.Join(dir, "events.jsonl")); err != nil {
		return nil, err
	}
	if l.raw, err = openAppend(filepath.Join(dir, "session.jsonl")); err != nil {
		l.events.Close()
		return nil, err
	}
	for _, f := range []*os.File{l.events, l.raw} {
		if fi, err := f.Stat(); err == nil {
			l.written += fi.Size()
		}
	}
	return l, nil
}

func openAppend(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return f, nil
}

// Dir is the session's folder.
func (l *Log) Dir() string { return l.dir }

func (l *Log) redact(b []byte) []byte {
	for _, s := range l.secrets {
		if strings.Contains(string(b), s) {
			b = []byte(strings.ReplaceAll(string(b), s, Redacted))
		}
	}
	return b
}

// Raw appends one raw stdout line (a newline is added).
func (l *Log) Raw(line []byte) error {
	buf := append(l.redact(line), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.raw.Write(buf)
	l.written += int64(n)
	return err
}

// Event appends one event as a JSON line.
func (l *Log) Event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	buf := append(l.redact(b), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.events.Write(buf)
	l.written += int64(n)
	return err
}

// Size is the bytes of the session's events.jsonl and session.jsonl: what
// was there when it was opened plus what was written since.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

// DaySize is the bytes of every file in root's folder for date, for a
// bound on what one day's audit may take. A missing folder is 0.
func DaySize(root string, date time.Time) (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(root, date.Format(DateLayout)), func(_ string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

// Status replaces status.json atomically (write, then rename).
func (l *Log) Status(st Status) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	b = append(l.redact(b), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	tmp, err := os.CreateTemp(l.dir, ".status-*.json")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(l.dir, "status.json"))
}

// Close closes the files.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.events.Close(), l.raw.Close())
}

// Folder is the folder of name (a session id or sandbox name) under root
// for date.
func Folder(root string, date time.Time, name string) string {
	return filepath.Join(root, date.Format(DateLayout), FolderName(name))
}

// Lines is one JSON-lines file of a folder, appended to.
type Lines struct {
	mu      sync.Mutex
	f       *os.File
	secrets []string
}

// OpenLines opens (creating) file in the folder of name under root.
func OpenLines(root string, date time.Time, name, file string, secrets []string) (*Lines, error) {
	if root == "" {
		return nil, errors.New("audit: empty root")
	}
	dir := Folder(root, date, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	f, err := openAppend(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	l := &Lines{f: f}
	for _, s := range secrets {
		if len(s) >= 4 {
			l.secrets = append(l.secrets, s)
		}
	}
	return l, nil
}

// Write appends v as one JSON line, secrets redacted.
func (l *Lines) Write(v any) error {
	_, err := l.WriteSized(v)
	return err
}

// WriteSized is Write, also returning the bytes written.
func (l *Lines) WriteSized(v any) (int64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	for _, s := range l.secrets {
		b = []byte(strings.ReplaceAll(string(b), s, Redacted))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.f.Write(append(b, '\n'))
	return int64(n), err
}

// Close closes the file.
func (l *Lines) Close() error { return l.f.Close() }

// Prune deletes whole date folders under root older than days (0 keeps
// everything). Folders whose names are not dates are left alone.
func Prune(root string, days int, now time.Time) error {
	if days <= 0 {
		return nil
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit: prune: %w", err)
	}
	y, m, d := now.Date()
	cutoff := time.Date(y, m, d, 0, 0, 0, 0, now.Location()).AddDate(0, 0, -days)
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		t, err := time.ParseInLocation(DateLayout, e.Name(), now.Location())
		if err != nil || len(e.Name()) != len(DateLayout) {
			continue
		}
		if t.Before(cutoff) {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Day is what one writer knows of a date folder's size: read once from
// disk (Open), then grown by its own writes (Bytes).
type Day struct {
	date  string
	Bytes int64
}

// Open reads the size of root's folder for date, unless it is the folder
// already open.
func (d *Day) Open(root string, date time.Time) {
	if day := date.Format(DateLayout); day != d.date {
		d.date = day
		d.Bytes, _ = DaySize(root, date)
	}
}
