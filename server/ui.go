package server

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"sync"
	"time"
)

// The inspector: static HTML and JavaScript embedded in the binary. The
// page reads the same API as every client, with the token in a cookie.
//
//go:embed ui
var uiFiles embed.FS

// The inspector's pages may load only themselves: no inline script, no
// third-party origin, no framing.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

func (s *Server) serveUI(w http.ResponseWriter, name string, status int) {
	data, err := fs.ReadFile(uiFiles, path.Join("ui", name))
	if err != nil {
		writeError(w, notFound("no inspector file %q", name))
		return
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func (s *Server) inspector(w http.ResponseWriter, r *http.Request) {
	s.serveUI(w, "index.html", http.StatusOK)
}

func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	s.serveUI(w, r.PathValue("file"), http.StatusOK)
}

// loginPage answers an unauthenticated GET /: a form for the token.
func (s *Server) loginPage(w http.ResponseWriter) {
	s.serveUI(w, "login.html", http.StatusUnauthorized)
}

// login checks the form's token and opens an inspector session: its
// cookie holds a random id, never the token (a browser sends a host's
// cookies to every port of it). SameSite=Strict and the origin check in
// authorize keep other pages from riding it.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	tok := r.PostFormValue("token")
	if tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) != 1 {
		time.Sleep(200 * time.Millisecond) // a little friction for guessing
		s.serveUI(w, "login.html", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.sessions.open(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL / time.Second),
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sessionCookie names the inspector session's cookie.
const sessionCookie = "sandbox_agent_session"

// sessionTTL is how long an inspector session lasts; maxSessions bounds
// how many are open (the oldest goes first).
const (
	sessionTTL  = 12 * time.Hour
	maxSessions = 256
)

// inspectorSessions are the inspector's open sessions: id → expiry.
type inspectorSessions struct {
	mu   sync.Mutex
	byID map[string]time.Time
}

func (ss *inspectorSessions) open() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	now := time.Now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, exp := range ss.byID {
		if now.After(exp) {
			delete(ss.byID, k)
		}
	}
	for len(ss.byID) >= maxSessions {
		oldest, at := "", time.Time{}
		for k, exp := range ss.byID {
			if oldest == "" || exp.Before(at) {
				oldest, at = k, exp
			}
		}
		delete(ss.byID, oldest)
	}
	ss.byID[id] = now.Add(sessionTTL)
	return id
}

func (ss *inspectorSessions) valid(id string) bool {
	if len(id) != 64 {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.byID[id]
	return ok && time.Now().Before(exp)
}
