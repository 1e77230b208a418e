package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// fakeResolver answers from a map: no test touches real DNS.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// harness is a Proxy served on a Unix socket, as deployed.
type harness struct {
	p     *Proxy
	sock  string
	dials atomic.Int32
	recs  chan Record
}

// newHarness serves a proxy; with loopbackOK its Forbidden lets 127.0.0.1
// through (to reach test servers), otherwise it is the default.
func newHarness(t *testing.T, allow []string, res fakeResolver, loopbackOK bool) *harness {
	t.Helper()
	h := &harness{recs: make(chan Record, 100)}
	o := Options{
		Allow:    allow,
		Resolver: res,
		Log:      func(r Record) { h.recs <- r },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h.dials.Add(1)
			// A safety net: tests never send traffic off the machine.
			if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
				return nil, fmt.Errorf("test refuses to dial %q", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	if loopbackOK {
		o.Forbidden = func(a netip.Addr) bool { return a != loopback && Forbidden(a) }
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "egp") // short: a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	h.p, h.sock = p, filepath.Join(dir, "egress.sock")
	ln, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() {
		p.Close()
		srv.Close()
		os.RemoveAll(dir)
	})
	return h
}

// client goes through the proxy; its credentials must not reach upstream.
func (h *harness) client(tlsConf *tls.Config) *http.Client {
	proxyURL, _ := url.Parse("http://sandbox:secret@egress")
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", h.sock)
		},
		TLSClientConfig: tlsConf,
	}}
}

// raw sends one request as text and reads the response head.
func (h *harness) raw(t *testing.T, method, target string) (*http.Response, *bufio.Reader, net.Conn) {
	t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	host := target
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		host = u.Host
	} else if strings.HasPrefix(target, "/") {
		host = "allowed.test"
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n", method, target, host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	return resp, br, c
}

func (h *harness) record(t *testing.T) Record {
	t.Helper()
	select {
	case r := <-h.recs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no Record logged")
		return Record{}
	}
}

func port(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestConnectTunnel(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello over tls")
	}))
	defer srv.Close()
	p := port(t, srv.URL)
	h := newHarness(t, []string{"allowed.test:" + p}, fakeResolver{"allowed.test": addrs("127.0.0.1")}, true)

	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	c := h.client(&tls.Config{RootCAs: pool, ServerName: "example.com"}) // the test cert's name
	resp, err := c.Get("https://Allowed.Test.:" + p + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello over tls" {
		t.Fatalf("body %q", body)
	}
	c.CloseIdleConnections() // ends the tunnel, so it is logged
	r := h.record(t)
	if r.Method != "CONNECT" || !r.Allowed || r.Host != "allowed.test" || strconv.Itoa(r.Port) != p ||
		r.Addr != "127.0.0.1:"+p || r.BytesUp == 0 || r.BytesDown == 0 || r.Reason != "" {
		t.Fatalf("record %+v", r)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

func TestForwardHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, k := range []string{"Proxy-Authorization", "Proxy-Foo", "X-Hop"} {
			if v := r.Header.Get(k); v != "" {
				http.Error(w, "leaked "+k, http.StatusTeapot)
				return
			}
		}
		w.Header().Set("X-Echo", r.Header.Get("X-Keep"))
		fmt.Fprintf(w, "%s %s %s", r.Method, r.Host, r.URL.RequestURI())
	}))
	defer srv.Close()
	p := port(t, srv.URL)
	h := newHarness(t, []string{"*.allowed.test:" + p}, fakeResolver{"www.allowed.test": addrs("127.0.0.1")}, true)

	req, _ := http.NewRequest("GET", "http://www.allowed.test:"+p+"/path?q=1", nil)
	req.Header.Set("Proxy-Foo", "1")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	req.Header.Set("X-Keep", "kept")
	resp, err := h.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "GET www.allowed.test:"+p+" /path?q=1" || resp.Header.Get("X-Echo") != "kept" {
		t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
	}
	r := h.record(t)
	if r.Method != "GET" || !r.Allowed || r.Host != "www.allowed.test" || r.Addr != "127.0.0.1:"+p ||
		r.BytesUp == 0 || r.BytesDown < int64(len(body)) || r.Reason != "" {
		t.Fatalf("record %+v", r)
	}
	if n := h.dials.Load(); n != 1 {
		t.Fatalf("%d dials", n)
	}
}

func TestDenied(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close() // nothing listens there now

	res := fakeResolver{
		"allowed.test": addrs("127.0.0.1"),
		"private.test": addrs("10.0.0.5"),
		"mixed.test":   addrs("8.8.8.8", "10.0.0.5"), // the public answer first
		"meta.test":    addrs("169.254.169.254"),
		"mapped.test":  addrs("::ffff:10.0.0.5"),
		"nat64.test":   addrs("64:ff9b::7f00:1"),
		"loop.test":    addrs("127.0.0.1"),
		"down.test":    addrs("127.0.0.1"),
	}
	allow := []string{"allowed.test", "*.wild.test", "private.test", "mixed.test", "meta.test", "mapped.test",
		"nat64.test", "loop.test", "nx.test", "down.test:" + strconv.Itoa(downPort)}
	for _, tc := range []struct {
		name, method, target string
		loopbackOK           bool // else the default Forbidden
		status               int
		host                 string
		port                 int
		reason               string // a fragment
		allowed              bool
		dials                int32
	}{
		{"off list", "CONNECT", "other.test:443", true, 403, "other.test", 443, "not on the allow-list", false, 0},
		{"off list http", "GET", "http://other.test/x", true, 403, "other.test", 80, "not on the allow-list", false, 0},
		{"wildcard apex", "CONNECT", "wild.test:443", true, 403, "wild.test", 443, "not on the allow-list", false, 0},
		{"private", "CONNECT", "private.test:443", false, 403, "private.test", 443, "resolves to a forbidden address 10.0.0.5 (private)", false, 0},
		{"private http", "GET", "http://private.test/", false, 403, "private.test", 80, "resolves to a forbidden address 10.0.0.5 (private)", false, 0},
		{"mixed answers", "CONNECT", "mixed.test:443", false, 403, "mixed.test", 443, "10.0.0.5 (private)", false, 0},
		{"metadata", "CONNECT", "meta.test:80", false, 403, "meta.test", 80, "169.254.169.254 (metadata)", false, 0},
		{"4in6", "CONNECT", "mapped.test:443", false, 403, "mapped.test", 443, "(private)", false, 0},
		{"nat64", "CONNECT", "nat64.test:443", false, 403, "nat64.test", 443, "(NAT64 of loopback)", false, 0},
		{"loopback by default", "CONNECT", "loop.test:443", false, 403, "loop.test", 443, "127.0.0.1 (loopback)", false, 0},
		{"port", "CONNECT", "allowed.test:25", true, 403, "allowed.test", 25, "port 25 not allowed", false, 0},
		{"port http", "GET", "http://allowed.test:8080/", true, 403, "allowed.test", 8080, "port 8080 not allowed", false, 0},
		{"ip literal", "CONNECT", "127.0.0.1:443", true, 403, "127.0.0.1", 443, "IP literals are not allowed; use a host name", false, 0},
		{"ip6 literal", "CONNECT", "[::1]:443", true, 403, "::1", 443, "IP literals are not allowed", false, 0},
		{"ip literal http", "GET", "http://127.0.0.1/", true, 403, "127.0.0.1", 80, "IP literals are not allowed", false, 0},
		{"resolve failure", "CONNECT", "nx.test:443", true, 502, "nx.test", 443, "resolve: ", false, 0},
		{"dial failure", "CONNECT", "down.test:" + strconv.Itoa(downPort), true, 502, "down.test", downPort, "dial: ", true, 1},
		{"origin form", "GET", "/x", true, 400, "", 0, "bad request", false, 0},
		{"https absolute form", "GET", "https://allowed.test/", true, 400, "", 0, "bad request", false, 0},
		{"connect without port", "CONNECT", "allowed.test", true, 400, "", 0, "bad request", false, 0},
		{"port zero", "CONNECT", "allowed.test:0", true, 400, "", 0, "bad request", false, 0},
		{"port overflow", "CONNECT", "allowed.test:65979", true, 400, "", 0, "bad request", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, allow, res, tc.loopbackOK)
			resp, br, _ := h.raw(t, tc.method, tc.target)
			body, _ := io.ReadAll(io.LimitReader(br, resp.ContentLength))
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.reason) {
				t.Fatalf("got %d %q, want %d with %q", resp.StatusCode, body, tc.status, tc.reason)
			}
			if got := resp.Header.Get("X-Sandbox-Agent-Egress") == "denied"; got == tc.allowed {
				t.Errorf("X-Sandbox-Agent-Egress: %q", resp.Header.Get("X-Sandbox-Agent-Egress"))
			}
			r := h.record(t)
			if r.Allowed != tc.allowed || !strings.Contains(r.Reason, tc.reason) || r.Method != tc.method ||
				tc.host != "" && (r.Host != tc.host || r.Port != tc.port) {
				t.Errorf("record %+v", r)
			}
			if n := h.dials.Load(); n != tc.dials {
				t.Errorf("%d dials, want %d", n, tc.dials)
			}
		})
	}

	t.Run("body", func(t *testing.T) {
		h := newHarness(t, allow, res, true)
		resp, br, _ := h.raw(t, "CONNECT", "Other.Test.:443")
		body, _ := io.ReadAll(io.LimitReader(br, resp.ContentLength))
		if want := "sandbox-agent egress proxy: other.test:443 denied: not on the allow-list\n"; string(body) != want {
			t.Fatalf("body %q, want %q", body, want)
		}
	})
}

// echoServer echoes each connection until its client half-closes.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func TestTunnelHalfClose(t *testing.T) {
	p := echoServer(t)
	h := newHarness(t, []string{"echo.test:" + p}, fakeResolver{"echo.test": addrs("127.0.0.1")}, true)
	resp, br, c := h.raw(t, "CONNECT", "echo.test:"+p)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	c.(*net.UnixConn).CloseWrite() // the echo still comes back
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v", got, err)
	}
	if r := h.record(t); !r.Allowed || r.BytesUp != 4 || r.BytesDown != 4 {
		t.Fatalf("record %+v", r)
	}
}

func TestCloseEndsTunnels(t *testing.T) {
	p := echoServer(t)
	h := newHarness(t, []string{"echo.test:" + p}, fakeResolver{"echo.test": addrs("127.0.0.1")}, true)
	const n = 5
	var readers [n]*bufio.Reader
	var conns [n]net.Conn
	for i := range n {
		resp, br, c := h.raw(t, "CONNECT", "echo.test:"+p)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		buf := make([]byte, 2)
		io.WriteString(c, "hi")
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hi" {
			t.Fatalf("echo %q, %v", buf, err)
		}
		readers[i], conns[i] = br, c
	}

	closed := make(chan struct{})
	go func() { h.p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	for i := range n {
		conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := readers[i].ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("tunnel %d still open after Close: %v", i, err)
		}
		if r := h.record(t); !r.Allowed || r.Method != "CONNECT" || r.BytesUp != 2 || r.BytesDown != 2 {
			t.Fatalf("record %+v", r)
		}
	}
	resp, _, _ := h.raw(t, "CONNECT", "echo.test:"+p)
	if resp.StatusCode != 503 {
		t.Fatalf("after Close: %d", resp.StatusCode)
	}
	if r := h.record(t); r.Allowed || r.Reason != "proxy closed" {
		t.Fatalf("record %+v", r)
	}
}

func TestCloseEndsStreamingResponse(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select { // then never finishes on its own
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	p := port(t, srv.URL)
	h := newHarness(t, []string{"stream.test:" + p}, fakeResolver{"stream.test": addrs("127.0.0.1")}, true)

	resp, err := h.client(nil).Get("http://stream.test:" + p + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	closed := make(chan struct{})
	go func() { h.p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Fatal("response completed normally after Close")
	}
	if r := h.record(t); !r.Allowed || r.BytesDown == 0 {
		t.Fatalf("record %+v", r)
	}
}
