package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// maxEventLine bounds one line of events.jsonl that ReadEvents hands out;
// a longer one (a huge tool output) is skipped.
const maxEventLine = 16 << 20

// ReadEvents calls fn with each event of a session's events.jsonl, in
// order: dir is the session's folder (Log.Dir, TurnResult.AuditDir), each
// line one JSON event without its newline, valid until fn returns. Lines
// over 16 MiB and lines that are not JSON (one cut by a crash) are
// skipped and counted. A missing file is an error matching fs.ErrNotExist,
// returned before fn is called; an error of fn ends the reading and is
// returned.
func ReadEvents(dir string, fn func(line []byte) error) (skipped int, err error) {
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(br, maxEventLine)
		if line == nil && err != nil {
			if err == io.EOF {
				err = nil
			}
			return skipped, err
		}
		switch {
		case errors.Is(err, errLineTooLong), !json.Valid(line):
			skipped++
		default:
			if ferr := fn(line); ferr != nil {
				return skipped, ferr
			}
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			if err == io.EOF {
				err = nil
			}
			return skipped, err
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its newline; a line over max is
// consumed and returned empty with errLineTooLong.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			if err == bufio.ErrBufferFull {
				for err == bufio.ErrBufferFull {
					_, err = br.ReadSlice('\n')
				}
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			return []byte{}, errLineTooLong
		}
		line = append(line, chunk...)
		switch err {
		case nil:
			return bytes.TrimSuffix(line, []byte("\n")), nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(line) == 0 {
				return nil, io.EOF
			}
			return line, nil
		default:
			return nil, err
		}
	}
}

// Resumed is what a writer continuing a session's audit after a restart
// needs (Resume).
type Resumed struct {
	Dir  string    // the session's folder
	Date time.Time // its date folder's day, midnight local time
	// Lines counts the raw lines in session.jsonl: the next is Lines+1.
	Lines int
	// Status is status.json (nil when missing, unreadable or over the
	// bound).
	Status *Status
}

// Resume finds the session's newest folder under root and reads what a
// writer continuing it needs; nil when root has none. status.json over
// maxStatus bytes is left out.
func Resume(root, sessionID string, maxStatus int64) (*Resumed, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	// Names sort as dates: the newest folder of the session wins.
	for i := len(ents) - 1; i >= 0; i-- {
		day, err := time.ParseInLocation(DateLayout, ents[i].Name(), time.Local)
		if err != nil || !ents[i].IsDir() || len(ents[i].Name()) != len(DateLayout) {
			continue
		}
		dir := Folder(root, day, sessionID)
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		r := &Resumed{Dir: dir, Date: day}
		if r.Lines, err = countLines(filepath.Join(dir, "session.jsonl")); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		if f, err := os.Open(filepath.Join(dir, "status.json")); err == nil {
			b, err := io.ReadAll(io.LimitReader(f, maxStatus+1))
			f.Close()
			var st Status
			if err == nil && int64(len(b)) <= maxStatus && json.Unmarshal(b, &st) == nil {
				r.Status = &st
			}
		}
		return r, nil
	}
	return nil, nil
}

// countLines counts the newlines of a file (0 when it is missing).
func countLines(p string) (int, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	n := 0
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
