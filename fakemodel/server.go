package fakemodel

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fixed answers.
const (
	// TitleText answers requests that offer no tools (session titles,
	// summaries); they consume no step.
	TitleText = "Sandbox session"
	// DoneText answers every tool-offering request once the script is
	// exhausted.
	DoneText = "DONE"
	// ModelID is listed by GET /v1/models and used when a request names no
	// model.
	ModelID = "fake-model"
)

// maxBody bounds a request body (CLIs send a few hundred KiB at most).
const maxBody = 64 << 20

// The APIs, as recorded in Request.API.
const (
	APIChat      = "chat"      // POST …/chat/completions
	APIResponses = "responses" // POST …/responses
	APIMessages  = "messages"  // POST …/messages
)

// Options configures a Server.
type Options struct {
	// LogFile, when set, receives every Request as one JSON line (appended).
	LogFile string
	// AllowNonLoopback lets Start listen on addresses other than loopback.
	AllowNonLoopback bool
}

// Request is one request the fake received. Secret header values
// (Authorization, x-api-key, …) are replaced by "[REDACTED]".
type Request struct {
	Seq    int             `json:"seq"` // 1-based arrival order
	Time   time.Time       `json:"time"`
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Query  string          `json:"query,omitempty"`
	Header http.Header     `json:"headers"`
	Body   json.RawMessage `json:"body,omitempty"` // the JSON body as sent; a non-JSON body as a JSON string
	API    string          `json:"api,omitempty"`  // APIChat, APIResponses, APIMessages or ""
	// Step is the index of the script step that answered (consumed or
	// sticky), or -1 (no tools offered, script exhausted, not a completion).
	Step   int `json:"step"`
	Status int `json:"status"` // HTTP status answered
	// Usage is the token usage the response reported (nil when it
	// reported none: an error).
	Usage *Usage `json:"usage,omitempty"`
}

// Server is the fake model. It implements http.Handler; Start serves it on
// a loopback listener.
type Server struct {
	script Script
	opts   Options
	nonce  string
	ids    atomic.Uint64

	mu      sync.Mutex
	next    int // next step to consume
	sticky  int // index of a sticky error step in force, or -1
	reqs    []Request
	logFile *os.File
	logErr  error

	ln       net.Listener
	hs       *http.Server
	serveErr chan error
}

// New validates the script and returns a server. It opens Options.LogFile.
func New(script Script, opts Options) (*Server, error) {
	if err := script.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &Server{script: script, opts: opts, nonce: hex.EncodeToString(b), sticky: -1}
	if opts.LogFile != "" {
		f, err := os.OpenFile(opts.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("fakemodel: request log: %w", err)
		}
		s.logFile = f
	}
	return s, nil
}

// Start listens on addr ("" means 127.0.0.1:0) and serves in the background.
// Unless Options.AllowNonLoopback is set, addr must be a loopback address.
func (s *Server) Start(addr string) error {
	if s.ln != nil {
		return errors.New("fakemodel: server already started")
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if !s.opts.AllowNonLoopback {
		if err := checkLoopback(addr); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fakemodel: %w", err)
	}
	s.ln = ln
	s.hs = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.serveErr = make(chan error, 1)
	go func() {
		err := s.hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr <- err
	}()
	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("fakemodel: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("fakemodel: refusing to listen on non-loopback address %q (use 127.0.0.1, or allow non-loopback explicitly)", addr)
}

// Addr is the listen address after Start ("127.0.0.1:PORT"), else "".
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is the base URL after Start ("http://127.0.0.1:PORT"), else "".
// CLIs usually want URL()+"/v1".
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return "http://" + s.Addr()
}

// Close stops serving (letting in-flight answers finish for up to two
// seconds) and closes the request log. It returns a serve or log error.
func (s *Server) Close() error {
	var errs []error
	if s.hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := s.hs.Shutdown(ctx); err != nil {
			_ = s.hs.Close()
		}
		cancel()
		errs = append(errs, <-s.serveErr)
		s.hs = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logFile != nil {
		errs = append(errs, s.logErr, s.logFile.Close())
		s.logFile = nil
	}
	return errors.Join(errs...)
}

// Requests returns a copy of every request received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	copy(out, s.reqs)
	return out
}

// Reset replaces the script and starts it from its first step, for a test
// moving on to its next scenario against the same running CLI. Recorded
// requests are kept.
func (s *Server) Reset(script Script) error {
	if err := script.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = script
	s.next = 0
	s.sticky = -1
	return nil
}

// Remaining is the number of script steps not consumed yet.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script.Responses) - s.next
}

// reply is what one completion request gets.
type reply struct {
	status   int // 200, or the HTTP error status
	errMsg   string
	step     int
	thinking string
	text     string
	call     *toolCall
	usage    Usage
}

func (rp reply) stopForTool() bool { return rp.call != nil }

// completionReq holds the request fields the fake looks at.
type completionReq struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	Tools         json.RawMessage `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (c completionReq) model() string {
	if c.Model != "" {
		return c.Model
	}
	return ModelID
}

// ServeHTTP routes a request. Paths are matched by suffix so that both
// /v1/chat/completions and /chat/completions (or /openai/v1/…) work.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	style := styleFor(r)
	switch {
	case r.Method == http.MethodHead: // connection probes (claude: HEAD /api/hello)
		s.recordSimple(r, nil, http.StatusOK)
		w.WriteHeader(http.StatusOK)
	case strings.HasSuffix(p, "/chat/completions"):
		s.completion(w, r, APIChat)
	case strings.HasSuffix(p, "/responses"):
		s.completion(w, r, APIResponses)
	case strings.HasSuffix(p, "/messages/count_tokens"):
		s.countTokens(w, r)
	case strings.HasSuffix(p, "/messages"):
		s.completion(w, r, APIMessages)
	case strings.HasSuffix(p, "/models") || strings.Contains(p, "/models/"):
		s.models(w, r, p, style)
	case r.Method == http.MethodGet && (p == "" || p == "/api/hello" || p == "/v1" || p == "/health"):
		s.recordSimple(r, nil, http.StatusOK)
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "server": "sandbox-agent fakemodel"})
	default:
		body, _ := readBody(r)
		s.recordSimple(r, body, http.StatusNotFound)
		writeError(w, style, http.StatusNotFound, "fakemodel: no route for "+r.Method+" "+r.URL.Path)
	}
}

// Error body styles.
const (
	styleOpenAI    = "openai"
	styleAnthropic = "anthropic"
)

func styleFor(r *http.Request) string {
	if r.Header.Get("anthropic-version") != "" || strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/messages") ||
		strings.Contains(r.URL.Path, "/messages/") {
		return styleAnthropic
	}
	return styleOpenAI
}

func (s *Server) models(w http.ResponseWriter, r *http.Request, p, style string) {
	if r.Method != http.MethodGet {
		s.recordSimple(r, nil, http.StatusMethodNotAllowed)
		writeError(w, style, http.StatusMethodNotAllowed, "fakemodel: use GET for "+r.URL.Path)
		return
	}
	if status, msg, failed := s.authFails(r); failed {
		s.recordSimple(r, nil, status)
		writeError(w, style, status, msg)
		return
	}
	s.recordSimple(r, nil, http.StatusOK)
	id := ModelID
	if i := strings.Index(p, "/models/"); i >= 0 {
		id = p[i+len("/models/"):]
	}
	model := map[string]any{
		"id": id, "object": "model", "created": 1735689600, "owned_by": "sandbox-agent",
		"type": "model", "display_name": "Fake Model", "created_at": "2025-01-01T00:00:00Z",
	}
	if strings.Contains(p, "/models/") {
		writeJSON(w, http.StatusOK, model)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": []any{model},
		"has_more": false, "first_id": ModelID, "last_id": ModelID,
	})
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil || r.Method != http.MethodPost {
		status := http.StatusBadRequest
		if err == nil {
			status, err = http.StatusMethodNotAllowed, errors.New("use POST")
		}
		s.recordSimple(r, body, status)
		writeError(w, styleAnthropic, status, "fakemodel: "+err.Error())
		return
	}
	if status, msg, failed := s.authFails(r); failed {
		s.recordSimple(r, body, status)
		writeError(w, styleAnthropic, status, msg)
		return
	}
	s.recordSimple(r, body, http.StatusOK)
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": estimateTokens(len(body))})
}

// completion answers one chat / responses / messages request.
func (s *Server) completion(w http.ResponseWriter, r *http.Request, api string) {
	style := styleOpenAI
	if api == APIMessages {
		style = styleAnthropic
	}
	body, err := readBody(r)
	var req completionReq
	if err == nil && r.Method != http.MethodPost {
		err = fmt.Errorf("use POST for %s", r.URL.Path)
	}
	if err == nil {
		if err = json.Unmarshal(body, &req); err != nil {
			err = fmt.Errorf("request body is not a JSON object: %w", err)
		}
	}
	if err != nil {
		status := http.StatusBadRequest
		if r.Method != http.MethodPost {
			status = http.StatusMethodNotAllowed
		}
		s.record(r, body, api, -1, status)
		writeError(w, style, status, "fakemodel: "+err.Error())
		return
	}

	rp := s.decide(r, body, api, parseTools(req.Tools))
	if rp.status != http.StatusOK {
		writeError(w, style, rp.status, rp.errMsg)
		return
	}
	switch api {
	case APIChat:
		s.writeChat(w, req, rp)
	case APIResponses:
		s.writeResponses(w, req, rp)
	case APIMessages:
		s.writeMessages(w, req, rp)
	}
}

// decide consumes the script under the lock and records the request.
func (s *Server) decide(r *http.Request, body []byte, api string, tools []toolDef) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.decideLocked(r, tools)
	if rp.status == http.StatusOK && rp.usage == (Usage{}) {
		out := len(rp.thinking) + len(rp.text)
		if rp.call != nil {
			out += len(rp.call.Name) + len(rp.call.Arguments)
		}
		rp.usage = Usage{InputTokens: estimateTokens(len(body)), OutputTokens: estimateTokens(out)}
	}
	var u *Usage
	if rp.status == http.StatusOK {
		u = &rp.usage
	}
	s.recordLocked(r, body, api, rp.step, rp.status, u)
	return rp
}

func (s *Server) decideLocked(r *http.Request, tools []toolDef) reply {
	if status, msg, failed := s.authFailsLocked(r); failed {
		return reply{status: status, errMsg: msg, step: -1}
	}
	if s.sticky >= 0 {
		return errorReply(s.sticky, s.script.Responses[s.sticky])
	}
	if len(tools) == 0 {
		return reply{status: http.StatusOK, step: -1, text: TitleText}
	}
	if s.next >= len(s.script.Responses) {
		return reply{status: http.StatusOK, step: -1, text: DoneText}
	}
	i := s.next
	st := s.script.Responses[i]
	s.next++
	if st.IsError() {
		if st.Sticky() {
			s.sticky = i
		}
		return errorReply(i, st)
	}
	rp := reply{status: http.StatusOK, step: i, thinking: st.Thinking, text: st.Text}
	if st.Usage != nil {
		rp.usage = *st.Usage
	}
	if st.Tool != "" {
		call, err := planCall(st, tools)
		if err != nil {
			// Answer text so the run ends visibly instead of retrying.
			rp.text = fmt.Sprintf("fakemodel: cannot play responses[%d] (tool %q): %v", i, st.Tool, err)
		} else {
			rp.call = &call
		}
	}
	return rp
}

func errorReply(i int, st Step) reply {
	msg := st.Message
	if msg == "" {
		msg = fmt.Sprintf("%s (fakemodel script)", http.StatusText(st.Error))
	}
	return reply{status: st.Error, errMsg: msg, step: i}
}

// authFails checks Script.ExpectKey.
func (s *Server) authFails(r *http.Request) (int, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authFailsLocked(r)
}

func (s *Server) authFailsLocked(r *http.Request) (int, string, bool) {
	if s.script.ExpectKey == "" {
		return 0, "", false
	}
	key := r.Header.Get("x-api-key")
	if key == "" {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			key = strings.TrimSpace(a[7:])
		}
	}
	if key == s.script.ExpectKey {
		return 0, "", false
	}
	if key == "" {
		return http.StatusUnauthorized, "fakemodel: no API key provided", true
	}
	return http.StatusUnauthorized, "Incorrect API key provided (fakemodel)", true
}

func estimateTokens(n int) int { return n/4 + 1 }

func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s%s%04d", prefix, s.nonce, s.ids.Add(1))
}

// ---- recording ----

var secretHeaders = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "X-Api-Key": true, "Api-Key": true,
	"X-Goog-Api-Key": true, "Cookie": true, "Set-Cookie": true,
}

func redact(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for k, vs := range out {
		if secretHeaders[http.CanonicalHeaderKey(k)] {
			for i := range vs {
				vs[i] = "[REDACTED]"
			}
		}
	}
	return out
}

func (s *Server) recordSimple(r *http.Request, body []byte, status int) {
	s.record(r, body, "", -1, status)
}

func (s *Server) record(r *http.Request, body []byte, api string, step, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(r, body, api, step, status, nil)
}

func (s *Server) recordLocked(r *http.Request, body []byte, api string, step, status int, usage *Usage) {
	rec := Request{
		Seq: len(s.reqs) + 1, Time: time.Now().UTC(), Method: r.Method, Path: r.URL.Path,
		Query: r.URL.RawQuery, Header: redact(r.Header), API: api, Step: step, Status: status, Usage: usage,
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if json.Valid(body) {
			rec.Body = append(json.RawMessage(nil), body...)
		} else {
			rec.Body, _ = json.Marshal(string(body))
		}
	}
	s.reqs = append(s.reqs, rec)
	if s.logFile != nil {
		line, err := json.Marshal(rec)
		if err == nil {
			_, err = s.logFile.Write(append(line, '\n'))
		}
		if err != nil && s.logErr == nil {
			s.logErr = fmt.Errorf("fakemodel: request log: %w", err)
		}
	}
}

// ---- HTTP helpers ----

func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	var rd io.Reader = io.LimitReader(r.Body, maxBody+1)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		defer zr.Close()
		rd = io.LimitReader(zr, maxBody+1)
	case "deflate":
		zr, err := zlib.NewReader(rd)
		if err != nil {
			return nil, fmt.Errorf("deflate body: %w", err)
		}
		defer zr.Close()
		rd = io.LimitReader(zr, maxBody+1)
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q (send plain, gzip or deflate JSON)", enc)
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return b, fmt.Errorf("reading body: %w", err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("body larger than %d bytes", maxBody)
	}
	return b, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalJSON(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers status with an error body in the API's style.
func writeError(w http.ResponseWriter, style string, status int, msg string) {
	if style == styleAnthropic {
		w.Header().Set("request-id", "req_fake_"+fmt.Sprint(time.Now().UnixNano()))
		writeJSON(w, status, map[string]any{
			"type":  "error",
			"error": map[string]any{"type": anthropicErrorType(status), "message": msg},
		})
		return
	}
	typ, code := openAIErrorType(status)
	w.Header().Set("x-request-id", "req_fake_"+fmt.Sprint(time.Now().UnixNano()))
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code},
	})
}

func anthropicErrorType(status int) string {
	switch status {
	case 400, 405, 415:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func openAIErrorType(status int) (typ string, code any) {
	switch status {
	case 401:
		return "invalid_request_error", "invalid_api_key"
	case 403:
		return "permission_error", "permission_denied"
	case 404:
		return "invalid_request_error", "not_found"
	case 429:
		return "rate_limit_error", "rate_limit_exceeded"
	}
	if status >= 500 {
		return "server_error", nil
	}
	return "invalid_request_error", nil
}
