// Package modelproxy is a key-injecting reverse proxy for LLM APIs, run on
// the host for one sandbox. The agent CLI inside the sandbox gets the
// proxy's URL as its base URL and a random per-sandbox token as its "API
// key", so the real credential never enters the container: the proxy
// accepts only that token, swaps it for the real key in the same place
// (Authorization Bearer, x-api-key, api-key, x-goog-api-key or the key
// query parameter), forwards to the one configured upstream and streams the
// answer back unbuffered (SSE arrives event by event). Revoke cuts the
// sandbox off when its agent closes.
//
// Only the model API is forwarded: the method and path below the
// upstream's base path must be one of the routes of Options.APIs (see
// API), e.g. POST /v1/messages, POST /chat/completions, POST /responses,
// GET /models; anything else (a gateway's /key/generate or admin routes,
// which would run with the real key) gets 403 and a Record with Denied
// set. The real key and the token are redacted from the response headers
// and, as it streams, from the response body, so an upstream that echoes
// the request cannot hand the key to the sandbox.
//
// Each request ends with one Record (method, path, status, byte counts,
// latencies, token usage read from the response) for the caller's log;
// Records never hold bodies, the key or the token. Options.Tap lets a
// recorder see each forwarded exchange's bodies as they pass.
//
// The caller serves a Proxy with http.Server, normally on a Unix socket.
//
// # Benchmark
//
// The overhead of the proxy against talking to the model directly (a
// fakemodel chat-completions SSE stream on loopback, the proxy on a Unix
// socket) is measured by
//
//	go test -run '^$' -bench Stream -benchtime 200x ./modelproxy/
//
// which reports mean and median first-byte-µs (time to the first SSE data
// line) and last-byte-µs per completion for BenchmarkStreamDirect and
// BenchmarkStreamViaProxy side by side. TestStreamNotBuffered proves that
// nothing is buffered.
package modelproxy

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-agent/sandbox-agent/metering"
)

// Options configure one sandbox's proxy.
type Options struct {
	// Upstream is the base URL of the real API, http or https, e.g.
	// "https://api.anthropic.com" or "http://127.0.0.1:8080/v1". Its path
	// is a prefix every request must carry (see BaseURL). Required.
	Upstream string
	// Key is the real credential; "" forwards with no credential (the
	// token is stripped), for upstreams that need none.
	Key string
	// Token is the only credential accepted from the sandbox (see
	// NewToken). Required, at least 32 characters so it cannot be guessed.
	Token string
	// CACertFile is an optional PEM bundle trusted for HTTPS upstreams in
	// addition to the system roots, for TLS-intercepting networks. It
	// applies to the default transport, so it cannot be combined with
	// Transport.
	CACertFile string
	// Transport, when set, replaces the default (a clone of
	// http.DefaultTransport without environment proxy, with CACertFile
	// applied), for tests or to share connections between proxies.
	Transport http.RoundTripper
	// Log, when set, is called once per request after it ended. It never
	// receives the key, the token or any body.
	Log func(Record)
	// APIs are the wire APIs whose routes are forwarded; empty = all of
	// them (AllAPIs). Every other request gets 403.
	APIs []API
	// Tap, when set, is called for each request that passed the token and
	// route checks, before it is forwarded; a nil Exchange means not
	// observed.
	Tap func(method, path string) Exchange
	// Meter, when set, is charged the usage of every response, and
	// checked before each request is forwarded: once its budget (or a
	// parent's) is spent, the proxy answers 402 itself, never forwarding
	// the request, and its Record has Budget set.
	Meter *metering.Meter
}

// Exchange sees one forwarded exchange as it passes, synchronously, on
// the proxy's goroutines. The proxy never makes two calls on one Exchange
// at the same time, but RequestBody may come from the transport's
// goroutine while the others come from the handler's.
//
// The bodies and headers are raw: the key, should the upstream echo it,
// is in them (the redaction applies to what the sandbox gets).
type Exchange interface {
	// RequestBody gets chunks of the request body as they are forwarded
	// (p must not be retained). A chunk the transport reads after the
	// exchange ended (the upstream answered without waiting for the whole
	// body) is not passed on: End is always the last call.
	RequestBody(p []byte)
	// Response gets the upstream's status and headers (a copy, before
	// redaction), before any body. It is not called when the upstream
	// could not be reached.
	Response(status int, header http.Header)
	// ResponseBody gets chunks of the upstream's response body (raw,
	// before redaction), each called before those bytes are written
	// toward the sandbox (p must not be retained).
	ResponseBody(p []byte)
	// End is called once, after the exchange ended and after every other
	// call; err is the failure, if any (its text is Record.Error).
	End(err error)
}

// Record describes one finished request, for the caller's log.
type Record struct {
	Time        time.Time `json:"time"` // request start, UTC
	Method      string    `json:"method"`
	Path        string    `json:"path"` // URL path only: the query can carry keys
	Status      int       `json:"status"`
	BytesIn     int64     `json:"bytes_in"`      // request body bytes from the sandbox
	BytesOut    int64     `json:"bytes_out"`     // response body bytes to the sandbox
	FirstByteMS float64   `json:"first_byte_ms"` // latency to the upstream's response headers
	DurationMS  float64   `json:"duration_ms"`
	Model       string    `json:"model,omitempty"`  // the model the response named
	Usage       *Usage    `json:"usage,omitempty"`  // nil when the response reported none
	Error       string    `json:"error,omitempty"`  // why it failed; never a secret
	Denied      bool      `json:"denied,omitempty"` // refused by the route allow-list (403), never forwarded
	Budget      bool      `json:"budget,omitempty"` // refused by the budget (402), never forwarded
	// Estimated: the response reported no usage the proxy could read,
	// or was cut short (its output then counted from the bytes that
	// passed when that is more than it reported); Usage is that
	// estimate, and the meter was charged it.
	Estimated bool `json:"estimated,omitempty"`
}

// Usage is the token usage an upstream reported in its response, the
// same for every wire API (see metering.Usage): the maximum seen of each
// count, since streams report input and cumulative output in separate
// events.
type Usage = metering.Usage

// Proxy is one sandbox's proxy: one upstream, one key, one token. It is an
// http.Handler.
type Proxy struct {
	up        *url.URL
	prefix    string // upstream path without trailing slash; "" for the root
	escPrefix string // the same, escaped
	routes    []route
	key       string
	token     []byte
	log       func(Record)
	tap       func(method, path string) Exchange
	rp        *httputil.ReverseProxy
	revoked   atomic.Bool
	meter     *metering.Meter

	activeMu sync.Mutex // guards the two below
	active   int        // requests being served
	idle     []chan struct{}
}

// The places a credential can come in, and go out, besides the key query
// parameter. Authorization carries "Bearer <token>".
var credHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// NewToken returns a fresh random token (256 bits) for Options.Token. The
// prefix makes it recognisable if it turns up somewhere.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return "sa-proxy-" + hex.EncodeToString(b)
}

// New validates o and returns its proxy.
func New(o Options) (*Proxy, error) {
	// The errors never quote the URL: it might carry a credential.
	up, err := url.Parse(o.Upstream)
	switch {
	case err != nil:
		return nil, errors.New("modelproxy: upstream is not a URL")
	case up.User != nil:
		return nil, errors.New("modelproxy: upstream must not carry user info (put the credential in Key)")
	case up.Scheme != "http" && up.Scheme != "https":
		return nil, fmt.Errorf("modelproxy: upstream scheme %q: must be http or https", up.Scheme)
	case up.Host == "" || up.Opaque != "":
		return nil, errors.New("modelproxy: upstream has no host")
	case up.RawQuery != "" || up.ForceQuery || up.Fragment != "":
		return nil, errors.New("modelproxy: upstream must not have a query or fragment")
	case len(o.Token) < 32:
		return nil, errors.New("modelproxy: token must be at least 32 characters (use NewToken)")
	case strings.ContainsAny(o.Key, "\r\n\x00"):
		return nil, errors.New("modelproxy: key contains a line break or NUL")
	case o.CACertFile != "" && o.Transport != nil:
		return nil, errors.New("modelproxy: CACertFile applies to the default transport; configure a custom Transport's TLS yourself")
	}
	routes, err := routesFor(o.APIs)
	if err != nil {
		return nil, err
	}
	rt := o.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil // egress goes straight to Upstream; HTTP(S)_PROXY in the host environment is not applied behind the caller's back
		// Ask for identity encoding (with Accept-Encoding stripped, the
		// transport would otherwise request gzip itself) so the usage
		// scanner reads plain bytes and no decompressor sits in the stream.
		t.DisableCompression = true
		if o.CACertFile != "" {
			pem, err := os.ReadFile(o.CACertFile)
			if err != nil {
				return nil, fmt.Errorf("modelproxy: CA bundle: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("modelproxy: CA bundle %s: no PEM certificate in it", o.CACertFile)
			}
			t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		rt = t
	}
	p := &Proxy{
		up: up, prefix: strings.TrimSuffix(up.Path, "/"), escPrefix: strings.TrimSuffix(up.EscapedPath(), "/"),
		routes: routes, key: o.Key, token: []byte(o.Token), log: o.Log, tap: o.Tap, meter: o.Meter,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      rt,
		FlushInterval:  -1, // flush after every write: SSE must reach the sandbox event by event
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		// Failures are reported through Record.Error, not the process's log.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	return p, nil
}

// Revoke makes every later request fail with 401, for when the sandbox's
// agent is closed. It is safe for concurrent use.
func (p *Proxy) Revoke() { p.revoked.Store(true) }

// Settle waits, up to timeout, until no request is being served (their
// records logged, their usage charged); it reports whether that
// happened. A CLI has the whole response a moment before the proxy logs
// it: a turn settles before it counts its requests.
func (p *Proxy) Settle(timeout time.Duration) bool {
	p.activeMu.Lock()
	if p.active == 0 {
		p.activeMu.Unlock()
		return true
	}
	ch := make(chan struct{})
	p.idle = append(p.idle, ch)
	p.activeMu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		p.activeMu.Lock()
		defer p.activeMu.Unlock()
		if i := slices.Index(p.idle, ch); i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
		}
		return false
	}
}

func (p *Proxy) begin() {
	p.activeMu.Lock()
	p.active++
	p.activeMu.Unlock()
}

func (p *Proxy) end() {
	p.activeMu.Lock()
	defer p.activeMu.Unlock()
	if p.active--; p.active == 0 {
		for _, ch := range p.idle {
			close(ch)
		}
		p.idle = nil
	}
}

// BaseURL is the base URL to give the sandbox's CLI: local ("http://HOST:PORT"
// as the sandbox reaches the proxy) plus the upstream's path, so the CLI's
// request paths map one to one onto the upstream's.
func (p *Proxy) BaseURL(local string) string {
	return strings.TrimSuffix(local, "/") + strings.TrimSuffix(p.up.EscapedPath(), "/")
}

type ctxKey struct{}

// exchange is one request's state, shared with the ReverseProxy hooks
// through the request context. The hooks run on the handler's goroutine.
type exchange struct {
	start     time.Time
	firstByte time.Duration
	scan      *usageScanner
	eof       bool // the response body was read to its end
	err       string
	release   func() // the meter's slot (Meter.Admit); nil without one

	// The tap, if any. mu serializes its calls (RequestBody comes from the
	// transport's goroutine); after ended, none is made.
	tap   Exchange
	mu    sync.Mutex
	ended bool
}

func (x *exchange) requestBody(p []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.ended {
		x.tap.RequestBody(p)
	}
}

func (x *exchange) response(status int, h http.Header) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tap.Response(status, h)
}

func (x *exchange) responseBody(p []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tap.ResponseBody(p)
}

func (x *exchange) end(err error) {
	x.mu.Lock()
	x.ended = true
	x.mu.Unlock()
	// After ended is set no other call starts, and the mutex ordered any
	// earlier one before this.
	x.tap.End(err)
}

// ServeHTTP checks the token and the path, then proxies the request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.begin()
	defer p.end() // first deferred, last run: after the record is logged
	x := &exchange{start: time.Now()}
	rec := Record{Time: x.start.UTC(), Method: r.Method, Path: p.redactString(r.URL.Path)}
	cw := &countWriter{ResponseWriter: w, red: p.newRedactor()}
	in := &countReader{rc: r.Body, size: r.ContentLength}
	// Deferred so that it also runs when ReverseProxy aborts a broken
	// stream with panic(http.ErrAbortHandler).
	defer func() {
		rec.Status, rec.BytesIn, rec.BytesOut = cw.status, in.n.Load(), cw.n
		rec.FirstByteMS, rec.DurationMS = ms(x.firstByte), ms(time.Since(x.start))
		if x.scan != nil {
			rec.Usage, rec.Model = x.scan.finish()
		}
		if p.meter != nil && costly(r) && cw.status/100 == 2 {
			u := rec.Usage
			if u == nil {
				// Answered, but no usage was measured: the client left
				// before the last event, the stream reported none, a line
				// passed the scanner's bound. Every CLI asks for usage, so
				// this is charged, from the bytes (4 a token, the framing
				// counted: more than the model's count, never less free).
				u, rec.Estimated = &Usage{InputTokens: (rec.BytesIn + 3) / 4, OutputTokens: (rec.BytesOut + 3) / 4}, true
				rec.Usage = u // so that the turn counts it too
			} else if est := (rec.BytesOut + 3) / 4; !x.scan.final && (x.scan.sse || !x.eof) && u.OutputTokens < est {
				// Its end never came (the client left, the upstream
				// broke off or sent an error event): the usage seen can
				// be a stream's first event (Anthropic's message_start:
				// the input, one output token). The output that passed
				// is charged from its bytes. (A JSON body past the
				// scanner's bound, its usage read from its tail, is
				// whole when it was read to its end.)
				u.OutputTokens, rec.Estimated = est, true
			}
			p.meter.Charge(rec.Model, *u)
		}
		if x.release != nil {
			x.release()
		}
		switch {
		case rec.Error != "" || x.err == "" && cw.err == nil:
		case r.Context().Err() != nil: // the failure is the client leaving
			rec.Error = "client canceled"
		case x.err != "":
			rec.Error = x.err
		default:
			rec.Error = "client: " + p.redact(cw.err)
		}
		if x.tap != nil {
			var err error
			if rec.Error != "" {
				err = errors.New(rec.Error)
			}
			x.end(err)
		}
		if p.log != nil {
			p.log(rec)
		}
	}()
	if why := p.authorize(r); why != "" {
		rec.Error = why
		writeError(cw, http.StatusUnauthorized, "authentication_error", "unknown or revoked token")
		return
	}
	// A protocol upgrade would splice the raw connections, past the
	// redaction and the tap; no model route needs one.
	if !p.allowed(r.Method, r.URL) || r.Header.Get("Upgrade") != "" {
		route := r.Method + " " + rec.Path
		if len(route) > 200 {
			route = route[:200] + "…"
		}
		if r.Header.Get("Upgrade") != "" {
			route += " (protocol upgrade)"
		}
		rec.Error, rec.Denied = "route not allowed: "+route, true
		writeError(cw, http.StatusForbidden, "permission_error", "route not allowed: "+route+" (only the model API is forwarded)")
		return
	}
	if p.meter != nil && costly(r) {
		// Only requests that cost are refused: listing models and
		// counting tokens stay.
		var err error
		// Released by the deferred record, after the charge.
		x.release, err = p.meter.Admit(r.Context())
		if errors.Is(err, metering.ErrBudgetExceeded) {
			rec.Error, rec.Budget = err.Error(), true
			// 402: the SDKs the CLIs use retry 408, 409, 429 and 5xx,
			// never this; they report it and the turn ends.
			// No numbers in what the CLI sees: pi retries an error whose
			// text matches a status such as 429 or 500 anywhere.
			writeError(cw, http.StatusPaymentRequired, "budget_exceeded", "budget exceeded: the host refuses further model requests")
			return
		}
		if errors.Is(err, metering.ErrLedger) {
			// A shared budget that cannot be read is not kept: refuse (a
			// 5xx: the CLI retries, then the turn fails as the driver's).
			rec.Error = metering.ErrLedger.Error() // not the database's words: the record is audited
			writeError(cw, http.StatusServiceUnavailable, "budget_unavailable", "the host cannot check the budget now")
			return
		}
		if err != nil { // the client left while waiting for a slot
			rec.Error = "client canceled"
			return
		}
	}
	if p.tap != nil {
		x.tap = p.tap(r.Method, r.URL.Path)
	}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, x))
	if r.Body != nil && r.Body != http.NoBody {
		if x.tap != nil {
			in.x = x
		}
		r.Body = in // shallow copy: the caller's request keeps its body
	}
	p.rp.ServeHTTP(cw, r)
}

// authorize returns why r is refused, or "" when every credential it
// carries is exactly the token and there is at least one.
func (p *Proxy) authorize(r *http.Request) string {
	if p.revoked.Load() {
		return "revoked token"
	}
	var creds []string
	for _, h := range credHeaders {
		for _, v := range r.Header.Values(h) {
			if h == "Authorization" {
				v = bearer(v)
			}
			creds = append(creds, v)
		}
	}
	creds = append(creds, r.URL.Query()["key"]...)
	if len(creds) == 0 {
		return "missing token"
	}
	for _, v := range creds {
		if subtle.ConstantTimeCompare([]byte(v), p.token) != 1 {
			return "unknown token"
		}
	}
	return ""
}

// bearer returns the credential of a Bearer Authorization value, else "".
func bearer(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// rewrite aims the request at the upstream and puts the key where the
// token was; authorize has checked that every credential there is the token.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.URL.Scheme, out.URL.Host, out.Host = p.up.Scheme, p.up.Host, "" // Host header = upstream host
	h := out.Header
	for _, k := range credHeaders {
		if _, ok := h[k]; !ok {
			continue
		}
		switch {
		case p.key == "":
			h.Del(k)
		case k == "Authorization":
			h.Set(k, "Bearer "+p.key)
		default:
			h.Set(k, p.key)
		}
	}
	if q := out.URL.Query(); q.Has("key") {
		if p.key == "" {
			q.Del("key")
		} else {
			q.Set("key", p.key)
		}
		out.URL.RawQuery = q.Encode()
	}
	h.Del("Proxy-Authorization")
	h.Del("Proxy-Connection")
	// Uncompressed answers let the usage scanner read them (see New).
	h.Del("Accept-Encoding")
}

func (p *Proxy) modifyResponse(res *http.Response) error {
	x := res.Request.Context().Value(ctxKey{}).(*exchange)
	x.firstByte = time.Since(x.start)
	if x.tap != nil {
		x.response(res.StatusCode, res.Header.Clone())
	}
	// A 101 body must stay the raw connection for ReverseProxy to splice
	// (ServeHTTP refuses upgrades, so the upstream cannot switch).
	if res.StatusCode != http.StatusSwitchingProtocols {
		x.scan = newUsageScanner(res.Header)
		// Redaction can change the body's length.
		res.Header.Del("Content-Length")
		res.ContentLength = -1
		res.Body = &teeBody{rc: res.Body, p: p, x: x, res: res, red: p.newRedactor()}
	}
	return nil
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x := r.Context().Value(ctxKey{}).(*exchange)
	x.err = "upstream: " + p.redact(err)
	writeError(w, http.StatusBadGateway, "api_error", "upstream request failed")
}

// redact returns err's text without the request URL (which can carry the
// key in its query) and without the key or token, should a transport quote
// them.
func (p *Proxy) redact(err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return p.redactString(err.Error())
}

// newRedactor returns a redactor for the key and the token. A key shorter
// than 8 characters is still redacted (it is a known string), at the cost
// of also replacing innocent text that happens to hold it.
func (p *Proxy) newRedactor() *redactor { return newRedactor(p.key, string(p.token)) }

// redactString returns s without the key or the token.
func (p *Proxy) redactString(s string) string {
	for _, secret := range []string{p.key, string(p.token)} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, redacted)
		}
	}
	return s
}

// writeError answers an error in the JSON shape the CLIs parse.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{
		"type": typ, "message": "sandbox-agent model proxy: " + msg,
	}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// countWriter counts the response bytes, keeps the status and redacts
// the headers as they go out. Unwrap lets ReverseProxy's
// ResponseController reach the real Flush and Hijack.
type countWriter struct {
	http.ResponseWriter
	red    *redactor
	status int
	n      int64
	err    error
}

func (w *countWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *countWriter) WriteHeader(code int) {
	// 1xx are interim (and arrive from the transport's goroutine): keep
	// only the final status.
	if code >= 200 && w.status == 0 {
		w.status = code
	}
	// Every header block passes here, 1xx included: an upstream that
	// echoes the request's headers would otherwise return the key.
	w.red.header(w.Header())
	w.ResponseWriter.WriteHeader(code)
}

func (w *countWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// countReader counts the request body. The transport may still read it
// after the handler returns, hence the atomic.
type countReader struct {
	rc   io.ReadCloser
	size int64     // Content-Length, or -1
	x    *exchange // set when the exchange is tapped
	n    atomic.Int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.rc.Read(b)
	// Having sent Content-Length bytes, the transport reads once more to
	// check for excess. When the upstream answered first, the server has
	// already closed the drained body on our first response write, and
	// that error would make the transport drop the upstream connection
	// mid-stream (golang/go#40747). Everything was read: it is EOF.
	if errors.Is(err, http.ErrBodyReadAfterClose) && c.n.Load() == c.size {
		err = io.EOF
	}
	c.n.Add(int64(n))
	if n > 0 && c.x != nil {
		c.x.requestBody(b[:n])
	}
	return n, err
}

func (c *countReader) Close() error { return c.rc.Close() }

// teeBody hands the upstream's response bytes, as they pass, to the usage
// scanner and the tap (raw), then redacts them for the sandbox, and keeps
// a read error for the Record. All synchronously: no goroutine, and
// nothing held back but a possible secret's beginning (see redactor).
type teeBody struct {
	rc  io.ReadCloser
	p   *Proxy
	x   *exchange
	res *http.Response // for its trailers
	red *redactor
	raw []byte // what was read from rc
	out []byte // redacted bytes not yet returned
	off int    // of out
	err error  // rc's error, returned once out is drained
}

func (t *teeBody) Read(b []byte) (int, error) {
	for {
		if t.off < len(t.out) {
			n := copy(b, t.out[t.off:])
			t.off += n
			return n, nil
		}
		if t.err != nil || len(b) == 0 {
			return 0, t.err
		}
		if cap(t.raw) < len(b) {
			t.raw = make([]byte, len(b))
		}
		n, err := t.rc.Read(t.raw[:len(b)])
		t.out, t.off = t.out[:0], 0
		if n > 0 {
			raw := t.raw[:n]
			if t.x.scan != nil {
				t.x.scan.write(raw)
			}
			if t.x.tap != nil {
				t.x.responseBody(raw)
			}
			t.out = t.red.write(t.out, raw)
		}
		switch {
		case err == io.EOF:
			t.x.eof = true
			t.out = t.red.flush(t.out)
		case err != nil && t.x.err == "":
			t.x.err = "upstream: " + t.p.redact(err)
		}
		t.err = err
		// Bytes held back as a possible secret's beginning leave nothing
		// to return yet: read on.
	}
}

// Close closes the upstream body, which fills in its trailers: they are
// redacted before ReverseProxy copies them out.
func (t *teeBody) Close() error {
	err := t.rc.Close()
	t.red.header(t.res.Trailer)
	return err
}

// costly reports whether r is a request a model charges for: a POST, but
// not Anthropic's token count.
func costly(r *http.Request) bool {
	return r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/count_tokens")
}
