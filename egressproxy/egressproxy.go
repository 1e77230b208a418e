// Package egressproxy is the host side of a sandbox's egress allow-list: an
// HTTP forward proxy (the sandbox's only way out) that admits allow-listed
// host names only, resolves them itself and dials the checked address, so a
// sandbox reaches exactly what it was granted and never the host's network.
package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Proxy. Only Allow is needed in production; the hooks
// exist so tests can run against loopback servers without real DNS.
type Options struct {
	// Allow holds host patterns: "registry.npmjs.org" (exact,
	// case-insensitive), "*.example.com" (any subdomain at any depth, not
	// the apex), with an optional ":PORT" ("git.example.com:22"). Without
	// a port only 80 and 443 are allowed.
	Allow []string
	// Resolver resolves allowed names (default net.DefaultResolver).
	Resolver Resolver
	// Dial connects to a checked "IP:port" (default a net.Dialer with a
	// 10s timeout). It is never given a name.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Forbidden reports addresses the proxy must not dial (default: the
	// Forbidden ranges and this host's own addresses; tests replace it to
	// reach a loopback server).
	Forbidden func(netip.Addr) bool
	// Log receives every decision: denials at once, allowed requests when
	// they end (with byte counts). It may be nil and must be safe for
	// concurrent use.
	Log func(Record)
	// Now is the clock of Records (default time.Now).
	Now func() time.Time
}

// Resolver is the part of *net.Resolver the proxy uses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Record is one decision of the proxy, for the sandbox's audit trail.
type Record struct {
	Time       time.Time `json:"time"`
	Method     string    `json:"method"` // CONNECT, GET, ...
	Host       string    `json:"host"`   // as asked (lower-cased)
	Port       int       `json:"port"`
	Allowed    bool      `json:"allowed"`
	Reason     string    `json:"reason,omitempty"` // why denied (or why an allowed request failed)
	Addr       string    `json:"addr,omitempty"`   // the IP:port dialed
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
}

// Proxy is the egress proxy of one sandbox; serve it with http.Server.
type Proxy struct {
	allow     []pattern
	resolver  Resolver
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	forbidden func(netip.Addr) bool
	log       func(Record)
	now       func() time.Time

	ctx    context.Context // canceled by Close: stops pending resolves and dials
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	nextID uint64
	live   map[uint64]func() // aborts each in-flight request, tunnel and upstream connection
	wg     sync.WaitGroup    // one per live entry, so Close can wait for them all
}

// New checks every pattern of o.Allow; the error names the bad one.
func New(o Options) (*Proxy, error) {
	p := &Proxy{resolver: o.Resolver, dial: o.Dial, forbidden: o.Forbidden, log: o.Log, now: o.Now, live: map[uint64]func(){}}
	for _, s := range o.Allow {
		pt, err := parsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("egressproxy: allow pattern %q: %w", s, err)
		}
		p.allow = append(p.allow, pt)
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dial == nil {
		p.dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	if p.forbidden == nil {
		p.forbidden = refused
	}
	if p.now == nil {
		p.now = time.Now
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Close aborts every open tunnel and request and waits for them to end;
// later requests get 503.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, abort := range p.live { // under the lock: an entry cannot be dropped (and its handler return) mid-abort
		abort()
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	return nil
}

// track registers something Close must abort and wait for.
func (p *Proxy) track(abort func()) (untrack func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	p.nextID++
	id := p.nextID
	p.live[id] = abort
	p.wg.Add(1)
	return func() {
		p.mu.Lock()
		delete(p.live, id)
		p.mu.Unlock()
		p.wg.Done()
	}, true
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &Record{Time: p.now(), Method: r.Method}
	rc := http.NewResponseController(w)
	untrack, ok := p.track(func() {
		// Unblocks reads and writes on the client's connection.
		now := time.Now()
		_ = rc.SetReadDeadline(now)
		_ = rc.SetWriteDeadline(now)
	})
	if !ok {
		p.refuse(w, rec, http.StatusServiceUnavailable, "proxy closed")
		return
	}
	defer untrack()
	r.Header.Del("Proxy-Authorization") // the sandbox's credentials for us, never for upstream

	var hostRaw, portRaw string
	if r.Method == http.MethodConnect {
		var err error
		if hostRaw, portRaw, err = net.SplitHostPort(r.Host); err != nil {
			p.refuse(w, rec, http.StatusBadRequest, "bad request")
			return
		}
	} else {
		// Only absolute-form http:// is a proxy request; https goes through CONNECT.
		if !r.URL.IsAbs() || r.URL.Scheme != "http" || r.URL.Host == "" {
			p.refuse(w, rec, http.StatusBadRequest, "bad request")
			return
		}
		hostRaw, portRaw = r.URL.Hostname(), r.URL.Port()
		if portRaw == "" {
			portRaw = "80"
		}
	}
	n, err := strconv.ParseUint(portRaw, 10, 16) // no sign, no overflow
	host, reason := normHost(hostRaw)
	port := int(n)
	rec.Host, rec.Port = host, port
	if err != nil || port == 0 {
		p.refuse(w, rec, http.StatusBadRequest, "bad request")
		return
	}
	if reason == "" {
		reason = p.check(host, port)
	}
	if reason != "" {
		p.refuse(w, rec, http.StatusForbidden, reason)
		return
	}

	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	defer context.AfterFunc(p.ctx, stop)()
	addrs, err := p.resolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		p.refuse(w, rec, http.StatusBadGateway, "resolve: "+err.Error())
		return
	}
	// Every answer must pass: a name mixing public and internal answers is
	// an attack, whichever one the dial would have reached.
	for _, a := range addrs {
		if p.forbidden(a) {
			why := refusal(a)
			p.refuse(w, rec, http.StatusForbidden, fmt.Sprintf("resolves to a forbidden address %s (%s)", a, why))
			return
		}
	}

	rec.Allowed = true
	var c net.Conn
	for _, a := range addrs {
		rec.Addr = netip.AddrPortFrom(a.Unmap(), uint16(port)).String()
		if c, err = p.dial(ctx, "tcp", rec.Addr); err == nil {
			break
		}
	}
	if err != nil {
		p.refuse(w, rec, http.StatusBadGateway, "dial: "+err.Error())
		return
	}
	up := &upstream{Conn: c}
	untrackUp, ok := p.track(func() { up.Close() })
	if !ok {
		up.Close()
		p.refuse(w, rec, http.StatusServiceUnavailable, "proxy closed")
		return
	}
	defer func() { // also on http.ErrAbortHandler panics from the forwarder
		up.Close()
		untrackUp()
		rec.BytesUp, rec.BytesDown = up.up.Load(), up.down.Load()
		p.record(rec)
	}()
	if r.Method == http.MethodConnect {
		p.tunnel(w, rc, up, rec)
	} else {
		p.forward(w, r.WithContext(ctx), up, rec)
	}
}

// tunnel answers CONNECT and splices the client and upstream together.
func (p *Proxy) tunnel(w http.ResponseWriter, rc *http.ResponseController, up *upstream, rec *Record) {
	cc, brw, err := rc.Hijack()
	if err != nil {
		rec.Reason = "hijack: " + err.Error()
		http.Error(w, "sandbox-agent egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	defer cc.Close()
	untrack, ok := p.track(func() { cc.Close() })
	if !ok {
		return
	}
	defer untrack()
	_ = cc.SetDeadline(time.Time{}) // the server's timeouts are not the tunnel's
	if _, err := io.WriteString(cc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { halfCopy(up, brw.Reader, cc) }) // brw.Reader: bytes the server already buffered
	halfCopy(cc, up, up)
	wg.Wait()
}

// halfCopy copies one direction; at EOF it passes the half-close on, and on
// any error (or when dst cannot half-close) it closes both sides.
func halfCopy(dst net.Conn, src io.Reader, srcConn net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); err == nil && ok && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
	srcConn.Close()
}

// forward relays a plain-HTTP request over the already dialed connection.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, up *upstream, rec *Record) {
	conns := make(chan net.Conn, 1)
	conns <- up
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			for k := range pr.Out.Header { // hop-by-hop ones are gone already
				if strings.HasPrefix(http.CanonicalHeaderKey(k), "Proxy-") {
					delete(pr.Out.Header, k)
				}
			}
		},
		Transport: &http.Transport{
			// The connection to the checked address: the name is never resolved again.
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				select {
				case c := <-conns:
					return c, nil
				default:
					return nil, errors.New("upstream connection already used")
				}
			},
			DisableKeepAlives:  true,
			DisableCompression: true, // pass the body through as is
		},
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			rec.Reason = "upstream: " + err.Error()
			http.Error(w, "sandbox-agent egress proxy: "+rec.Reason, http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// refuse answers a request the proxy will not (or could not) carry out.
func (p *Proxy) refuse(w http.ResponseWriter, rec *Record, code int, reason string) {
	rec.Reason = reason
	h := w.Header()
	verb := "failed"
	if !rec.Allowed {
		verb = "denied"
		h.Set("X-Sandbox-Agent-Egress", "denied")
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintf(w, "sandbox-agent egress proxy: %s %s: %s\n", net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)), verb, reason)
	p.record(rec)
}

func (p *Proxy) record(rec *Record) {
	rec.DurationMS = float64(p.now().Sub(rec.Time)) / float64(time.Millisecond)
	if p.log != nil {
		p.log(*rec)
	}
}

// upstream counts the bytes sent (up) and received (down); atomically,
// since the forwarder's transport may still touch the connection as the
// handler returns.
type upstream struct {
	net.Conn
	up, down atomic.Int64
}

func (c *upstream) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.down.Add(int64(n))
	return n, err
}

func (c *upstream) Write(b []byte) (int, error) {
	c.up.Add(int64(len(b))) // before the bytes can reach upstream (and a reply end the request)
	n, err := c.Conn.Write(b)
	c.up.Add(int64(n - len(b)))
	return n, err
}

func (c *upstream) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
