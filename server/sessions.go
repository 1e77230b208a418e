package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/audit"
	"github.com/sandbox-agent/sandbox-agent/store"
)

type sessionRef struct {
	SessionID string `json:"session_id"`
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
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
		if a.ag == nil {
			return "" // lost: no current session
		}
		return a.ag.SessionID()
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

func (s *Server) dumpSession(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	sid := sessionID(a, r)
	d, err := a.ag.DumpSession(r.Context(), sid)
	if err != nil {
		writeError(w, sessionErr(err, sid))
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) loadSession(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
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
	writeJSON(w, http.StatusCreated, sessionRef{SessionID: id})
}

func (s *Server) forkSession(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	sid := sessionID(a, r)
	id, err := a.ag.ForkSession(r.Context(), sid)
	if err != nil {
		writeError(w, sessionErr(err, sid))
		return
	}
	writeJSON(w, http.StatusCreated, sessionRef{SessionID: id})
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	sid := sessionID(a, r)
	if err := a.ag.DeleteSession(r.Context(), sid); err != nil {
		writeError(w, sessionErr(err, sid))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setSession(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	var ref sessionRef
	if err := decode(r, &ref); err != nil {
		writeError(w, err)
		return
	}
	a.ag.SetSession(ref.SessionID)
	if err := s.save(r.Context(), a, statusIdle); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// rulesRequest is the body of PUT /v1/agents/{id}/rules. Field names are
// a public interface.
type rulesRequest struct {
	Rules *string `json:"rules"`
}

// putRules installs instruction text where the agent's CLI reads rules
// (Agent.InstallRules); later turns follow them.
func (s *Server) putRules(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	var req rulesRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Rules == nil {
		writeError(w, badRequest("rules: required (the instruction text)"))
		return
	}
	if err := a.ag.InstallRules(r.Context(), *req.Rules); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// skillRequest is the body of POST /v1/agents/{id}/skills: a skill's
// files as text, by path relative to the skill's folder. Field names are
// a public interface.
type skillRequest struct {
	Name  string            `json:"name"`
	Files map[string]string `json:"files"`
}

// maxSkillFiles bounds a skill's files (POST .../skills).
const maxSkillFiles = 256

// postSkill installs a skill where the agent's CLI reads skills
// (Agent.InstallSkill); later turns see it.
func (s *Server) postSkill(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	var req skillRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	// Each file is one exec in the sandbox while the agent is held.
	if len(req.Files) > maxSkillFiles {
		writeError(w, badRequest("skill %.200q: %d files, at most %d", req.Name, len(req.Files), maxSkillFiles))
		return
	}
	sk := sandboxagent.Skill{Name: req.Name, Files: make(map[string][]byte, len(req.Files))}
	for p, text := range req.Files {
		sk.Files[p] = []byte(text)
	}
	if err := a.ag.InstallSkill(r.Context(), sk); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionEvents streams a session's events.jsonl from the audit trail
// (the folder of the agent's latest turn in that session) as one JSON
// object, line by line: {"session_id", "audit_dir", "events": [...],
// "skipped": N}.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request, a *agent, rec store.Agent) {
	sid := sessionID(a, r)
	if sid == "" && a.lost == "" {
		sid = rec.SessionID // the sandbox not here (borrowed elsewhere, or not adopted yet)
	}
	var dir string
	turns, err := s.st.ListTurns(r.Context(), a.id)
	if err != nil {
		writeError(w, fmt.Errorf("list turns: %w", err))
		return
	}
	for _, t := range turns {
		var res struct {
			SessionID string `json:"session_id"`
			AuditDir  string `json:"audit_dir"`
		}
		if json.Unmarshal(t.Result, &res) == nil && res.SessionID == sid && res.AuditDir != "" {
			dir = res.AuditDir
		}
	}
	if dir == "" {
		writeError(w, notFound("no audit trail of session %q for agent %s (audit off, or no turn of it here)", sid, a.id))
		return
	}
	var bw *bufio.Writer
	begin := func() {
		head, _ := json.Marshal(map[string]string{"session_id": sid, "audit_dir": dir})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		bw = bufio.NewWriter(w)
		bw.Write(head[:len(head)-1])
		bw.WriteString(`,"events":[`)
	}
	n := 0
	skipped, err := audit.ReadEvents(dir, func(line []byte) error {
		if bw == nil {
			begin()
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		n++
		_, err := bw.Write(line)
		return err
	})
	if bw == nil {
		if err != nil {
			writeError(w, notFound("session %q: %v", sid, err))
			return
		}
		begin()
	}
	fmt.Fprintf(bw, `],"skipped":%d}`+"\n", skipped)
	bw.Flush()
}
