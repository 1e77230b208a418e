package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

type sessionRef struct {
	SessionID string `json:"session_id"`
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, a *agent) {
	list, err := a.ag.ListSessions(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []sandboxagent.SessionInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"current": a.ag.SessionID(), "sessions": list})
}

// sessionID is the request's {sid}; "current" names the agent's current
// session.
func sessionID(a *agent, r *http.Request) string {
	sid := r.PathValue("sid")
	if sid == "current" {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.session
	}
	return sid
}

// sessionErr turns a driver's "no such session" into a 404.
func sessionErr(err error, sid string) error {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, sandboxagent.ErrPathNotFound) {
		return notFound("no session %q: %v", sid, err)
	}
	return err
}

func (s *Server) dumpSession(w http.ResponseWriter, r *http.Request, a *agent) {
	sid := sessionID(a, r)
	d, err := a.ag.DumpSession(r.Context(), sid)
	if err != nil {
		writeError(w, sessionErr(err, sid))
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) loadSession(w http.ResponseWriter, r *http.Request, a *agent) {
	var d sandboxagent.SessionDump
	if err := decode(r, &d); err != nil {
		writeError(w, err)
		return
	}
	if d.SessionID == "" || len(d.Files) == 0 {
		writeError(w, badRequest("session dump: want session_id and files (the body of GET .../sessions/{sid})"))
		return
	}
	id, err := a.ag.LoadSession(r.Context(), d)
	if err != nil {
		writeError(w, err)
		return
	}
	a.setSession(id)
	writeJSON(w, http.StatusCreated, sessionRef{SessionID: id})
}

func (s *Server) forkSession(w http.ResponseWriter, r *http.Request, a *agent) {
	sid := sessionID(a, r)
	id, err := a.ag.Fork(r.Context(), sid)
	if err != nil {
		writeError(w, sessionErr(err, sid))
		return
	}
	writeJSON(w, http.StatusCreated, sessionRef{SessionID: id})
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, a *agent) {
	sid := sessionID(a, r)
	if err := a.ag.DeleteSession(r.Context(), sid); err != nil {
		writeError(w, sessionErr(err, sid))
		return
	}
	a.setSession(a.ag.SessionID())
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setSession(w http.ResponseWriter, r *http.Request, a *agent) {
	var ref sessionRef
	if err := decode(r, &ref); err != nil {
		writeError(w, err)
		return
	}
	a.ag.SetSession(ref.SessionID)
	a.setSession(ref.SessionID)
	w.WriteHeader(http.StatusNoContent)
}

// maxAuditLine bounds one line of events.jsonl the answer carries; a
// longer one (a huge tool output) is left out and counted.
const maxAuditLine = 16 << 20

// sessionEvents streams a session's events.jsonl from the audit trail
// (the folder of the agent's latest turn in that session) as one JSON
// object, line by line: {"session_id", "audit_dir", "events": [...],
// "skipped": N}.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request, a *agent) {
	sid := sessionID(a, r)
	var dir string
	a.mu.Lock()
	for _, t := range a.turns {
		if t.res.SessionID == sid && t.res.AuditDir != "" {
			dir = t.res.AuditDir
		}
	}
	a.mu.Unlock()
	if dir == "" {
		writeError(w, notFound("no audit trail of session %q for agent %s (audit off, or no turn of it here)", sid, a.id))
		return
	}
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		writeError(w, notFound("session %q: %v", sid, err))
		return
	}
	defer f.Close()
	head, _ := json.Marshal(map[string]string{"session_id": sid, "audit_dir": dir})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	bw.Write(head[:len(head)-1])
	bw.WriteString(`,"events":[`)
	br := bufio.NewReaderSize(f, 64<<10)
	n, skipped := 0, 0
	for {
		line, err := readLine(br, maxAuditLine)
		if line == nil && err != nil {
			break
		}
		switch {
		case errors.Is(err, errLineTooLong), !json.Valid(line): // too long, or cut by a crash
			skipped++
		default:
			if n > 0 {
				bw.WriteByte(',')
			}
			bw.Write(line)
			n++
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			break
		}
	}
	fmt.Fprintf(bw, `],"skipped":%d}`+"\n", skipped)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its newline; a line over max is
// consumed and returned empty with errLineTooLong.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			line = []byte{} // drop, but keep reading to the newline
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
