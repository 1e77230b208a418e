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
