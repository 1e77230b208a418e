package modelproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

const testKey = "sk-real-KEY-do-not-leak-0123456789"

var testToken = NewToken()

const unauthorizedBody = `{"error":{"message":"sandbox-agent model proxy: unknown or revoked token","type":"authentication_error"}}`

// noSecrets fails the test if s contains the key or the token.
func noSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{testKey, testToken, strings.TrimPrefix(testToken, "sa-proxy-")} {
		if strings.Contains(s, secret) {
			t.Errorf("%s leaks a secret: %s", what, s)
		}
	}
}

// recorder collects Records; Log runs after the response has been sent,
// so tests wait for it. Every Record is checked for secrets.
type recorder chan Record

func (rc recorder) log(r Record) { rc <- r }

func (rc recorder) next(t *testing.T) Record {
	t.Helper()
	select {
	case r := <-rc:
		b, _ := json.Marshal(r)
		noSecrets(t, "record", string(b))
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no Record logged within 5s")
		return Record{}
	}
}

// startProxy serves a proxy for o (Token and Log filled in) on loopback.
func startProxy(t *testing.T, o Options) (*Proxy, string, recorder) {
	t.Helper()
	rc := make(recorder, 100)
	if o.Token == "" {
		o.Token = testToken
	}
	o.Log = rc.log
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL, rc
}

// do sends req and returns the status and body, which must hold no secret.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, "response body", string(b))
	return resp.StatusCode, string(b)
}

func newReq(t *testing.T, method, u, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// withToken puts tok where place says: a header name, or "key" for the query.
func withToken(req *http.Request, place, tok string) {
	switch place {
	case "key":
		q := req.URL.Query()
		q.Set("key", tok)
		req.URL.RawQuery = q.Encode()
	case "Authorization":
		req.Header.Set(place, "Bearer "+tok)
	default:
		req.Header.Set(place, tok)
	}
}

func TestKeyReplacesTokenInPlace(t *testing.T) {
	places := []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "key"}
	for _, place := range places {
		for _, key := range []string{testKey, ""} {
			t.Run(fmt.Sprintf("%s/key=%t", place, key != ""), func(t *testing.T) {
				seen := make(chan *http.Request, 1)
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					seen <- r.Clone(context.Background())
					io.WriteString(w, "ok")
				}))
				defer up.Close()
				_, purl, rc := startProxy(t, Options{Upstream: up.URL + "/v1", Key: key})

				req := newReq(t, "POST", purl+"/v1/chat/completions?other=1", "{}")
				withToken(req, place, testToken)
				req.Header.Set("Accept-Encoding", "gzip")
				req.Header.Set("Proxy-Authorization", "Basic Zm9vOmJhcg==")
				req.Header.Set("X-Forwarded-For", "10.0.0.9")
				if code, body := do(t, req); code != 200 || body != "ok" {
					t.Fatalf("got %d %q", code, body)
				}
				r := <-seen
				want := key
				if key != "" && place == "Authorization" {
					want = "Bearer " + key
				}
				for _, p := range places {
					var got string
					if p == "key" {
						got = r.URL.Query().Get("key")
					} else {
						got = r.Header.Get(p)
					}
					if p == place && got != want || p != place && got != "" {
						t.Errorf("upstream %s = %q, want %q", p, got, map[bool]string{true: want}[p == place])
					}
				}
				for _, h := range []string{"Accept-Encoding", "Proxy-Authorization", "X-Forwarded-For"} {
					if v := r.Header.Get(h); v != "" {
						t.Errorf("upstream got %s: %q", h, v)
					}
				}
				hb, _ := json.Marshal(r.Header)
				if strings.Contains(string(hb)+r.URL.RawQuery, testToken) {
					t.Errorf("token reached the upstream: %s %s", hb, r.URL.RawQuery)
				}
				if r.URL.Path != "/v1/chat/completions" || r.URL.Query().Get("other") != "1" || r.Host != strings.TrimPrefix(up.URL, "http://") {
					t.Errorf("upstream got host %q path %q query %q", r.Host, r.URL.Path, r.URL.RawQuery)
				}
				if rec := rc.next(t); rec.Status != 200 || rec.Error != "" || rec.Path != "/v1/chat/completions" || rec.Method != "POST" {
					t.Errorf("record %+v", rec)
				}
			})
		}
	}
}

func TestUnauthorized(t *testing.T) {
	other := NewToken()
	cases := []struct {
		name   string
		set    func(*http.Request)
		revoke bool
	}{
		{"none", func(*http.Request) {}, false},
		{"wrong bearer", func(r *http.Request) { withToken(r, "Authorization", other) }, false},
		{"basic scheme", func(r *http.Request) { r.Header.Set("Authorization", "Basic "+testToken) }, false},
		{"bare authorization", func(r *http.Request) { r.Header.Set("Authorization", testToken) }, false},
		{"prefix of token", func(r *http.Request) { withToken(r, "X-Api-Key", testToken[:40]) }, false},
		{"good bearer, wrong x-api-key", func(r *http.Request) {
			withToken(r, "Authorization", testToken)
			withToken(r, "X-Api-Key", other)
		}, false},
		{"good header, wrong query key", func(r *http.Request) {
			withToken(r, "X-Goog-Api-Key", testToken)
			withToken(r, "key", other)
		}, false},
		{"revoked", func(r *http.Request) { withToken(r, "Authorization", testToken) }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
			defer up.Close()
			p, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey})
			if tc.revoke {
				p.Revoke()
			}
			req := newReq(t, "POST", purl+"/v1/messages", `{"a":1}`)
			tc.set(req)
			code, body := do(t, req)
			if code != 401 || body != unauthorizedBody {
				t.Errorf("got %d %s", code, body)
			}
			if rec := rc.next(t); rec.Status != 401 || rec.Error == "" {
				t.Errorf("record %+v", rec)
			}
			if hits.Load() != 0 {
				t.Error("upstream was hit")
			}
		})
	}
}

func TestRevokeConcurrent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	p, purl, _ := startProxy(t, Options{Upstream: up.URL, Key: testKey})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				req := newReq(t, "GET", purl+"/x", "")
				withToken(req, "X-Api-Key", testToken)
				do(t, req)
			}
		})
	}
	p.Revoke()
	wg.Wait()
	req := newReq(t, "GET", purl+"/x", "")
	withToken(req, "X-Api-Key", testToken)
	if code, _ := do(t, req); code != 401 {
		t.Errorf("after Revoke: %d", code)
	}
}

func TestBaseURL(t *testing.T) {
	p, err := New(Options{Upstream: "http://127.0.0.1:1/v1/", Token: testToken})
	if err != nil || p.BaseURL("http://127.0.0.1:9/") != "http://127.0.0.1:9/v1" {
		t.Errorf("BaseURL: %v %q", err, p.BaseURL("http://127.0.0.1:9/"))
	}
	root, err := New(Options{Upstream: "https://api.anthropic.com", Token: testToken})
	if err != nil || root.BaseURL("http://127.0.0.1:9") != "http://127.0.0.1:9" {
		t.Errorf("root BaseURL: %v %q", err, root.BaseURL("http://127.0.0.1:9"))
	}
}

// rawStatus sends one request line exactly as given (no client-side
// cleaning or escaping) with the token and returns the status.
func rawStatus(t *testing.T, purl, method, target string, extra ...string) int {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(purl, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := method + " " + target + " HTTP/1.1\r\nHost: sandbox\r\nX-Api-Key: " + testToken + "\r\nContent-Length: 2\r\nConnection: close\r\n"
	for _, h := range extra {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n{}"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	noSecrets(t, "response body", string(b))
	if resp.StatusCode == 403 && method != "HEAD" && !strings.Contains(string(b), `"type":"permission_error"`) {
		t.Errorf("%s %s: 403 body %s", method, target, b)
	}
	return resp.StatusCode
}

// TestAllowList sends each API's routes, and what must not pass, to a
// proxy with a path-less and with a /v1 base URL: an allowed route must
// reach the upstream at the same path, a refused one must get 403, a
// Denied Record and no upstream request.
func TestAllowList(t *testing.T) {
	type tc struct {
		method, path string // path below the base
		ok           bool
	}
	model := func(prefix string) []tc {
		return []tc{
			{"GET", prefix + "/models", true}, {"GET", prefix + "/models/gpt-4.1-mini", true},
			{"GET", prefix + "/models/claude-sonnet-4-5@20250929", true}, {"GET", prefix + "/models/llama3:8b", true},
			{"POST", prefix + "/models", false}, {"DELETE", prefix + "/models/x", false},
			{"GET", prefix + "/models/", false}, {"GET", prefix + "/models/a/b", false},
			{"GET", prefix + "/models/.x", false}, {"GET", prefix + "/models/..", false},
			{"GET", prefix + "/models/%2e%2e", false}, {"GET", prefix + "/models/a%2Fb", false},
			{"GET", prefix + "/models/a%20b", false}, {"GET", prefix + "/models/../key/generate", false},
		}
	}
	// Refused whatever the API.
	common := []tc{
		{"POST", "/key/generate", false}, {"GET", "/admin/x", false}, {"POST", "/admin/x", false},
		{"GET", "/", false}, {"GET", "", false}, {"POST", "/v1/key/generate", false},
		{"POST", "/v1/messages/../../key/generate", false}, {"POST", "/messages/../key/generate", false},
		{"POST", "/v1/%2e%2e/key/generate", false}, {"POST", "/%2e%2e/key/generate", false},
		{"POST", "/v1%2Fmessages", false}, {"POST", "/v1/messages%2F..%2F..%2Fkey", false},
		{"POST", "//key/generate", false}, {"POST", "//v1/messages", false}, {"POST", "/v1//messages", false},
		{"POST", "//messages", false}, {"POST", "/v1/messagesX", false}, {"POST", "/messagesX", false},
		{"POST", "/v1/messages/x/../..", false}, {"POST", "/v1/messages/", false}, {"POST", "/v1/messages/.", false},
		{"POST", "/v1/messages;x", false}, {"POST", "/v1/messages%3Bx", false}, {"POST", "/v1/..;/key/generate", false},
		{"POST", "/v1/..%5Ckey/generate", false}, {"POST", "/v1/...", false}, {"POST", "/v1/messages/batches", false},
		{"POST", "/chat/completions/../../key/generate", false}, {"POST", "/responses/../key/generate", false},
		{"POST", "/responses/compact", false}, {"GET", "/responses", false}, {"POST", "/v1/responses", false},
		{"POST", "/v1/chat/completions", false}, {"POST", "/completions", false}, {"POST", "/embeddings", false},
		{"POST", "/files", false}, {"HEAD", "/", false}, {"GET", "/api/hello", false}, {"POST", "/api/hello", false},
		{"POST", "/%6Dessages", false},
	}
	for _, m := range []string{"OPTIONS", "PUT", "DELETE", "GET", "PATCH", "HEAD"} {
		for _, p := range []string{"/v1/messages", "/messages", "/messages/count_tokens", "/chat/completions", "/responses"} {
			common = append(common, tc{m, p, false})
		}
	}
	anthropic := append([]tc{
		{"POST", "/v1/messages", true}, {"POST", "/messages", true}, {"POST", "/v1/messages?beta=true", true},
		{"POST", "/v1/messages/count_tokens", true}, {"POST", "/messages/count_tokens?beta=true", true},
		{"HEAD", "/api/hello", true}, {"POST", "/chat/completions", false}, {"POST", "/responses", false},
		{"POST", "/v1/v1/messages", false}, {"POST", "/v1/messages/count_tokens/x", false},
	}, append(model(""), model("/v1")...)...)
	chat := append([]tc{
		{"POST", "/chat/completions", true}, {"POST", "/chat/completions?x=1", true},
		{"POST", "/messages", false}, {"POST", "/responses", false}, {"HEAD", "/api/hello", false},
		{"GET", "/v1/models", false}, {"POST", "/chat/completions/", false}, {"POST", "/chat//completions", false},
	}, model("")...)
	responses := append([]tc{
		{"POST", "/responses", true}, {"POST", "/messages", false}, {"POST", "/chat/completions", false},
		{"GET", "/v1/models", false}, {"POST", "/responses/", false}, {"GET", "/responses/resp_1", false},
	}, model("")...)
	all := append(append(append([]tc{}, anthropic...), chat...), responses...)

	var seen atomic.Value
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		seen.Store(r.URL.RequestURI())
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, api := range []struct {
		name  string
		apis  []API
		cases []tc
	}{
		{"anthropic", []API{APIAnthropicMessages}, anthropic},
		{"chat", []API{APIOpenAIChat}, chat},
		{"responses", []API{APIOpenAIResponses}, responses},
		{"union", nil, all},
		{"two", []API{APIOpenAIChat, APIOpenAIResponses}, append(append([]tc{}, chat...), responses...)},
	} {
		for _, base := range []string{"", "/v1", "/api/coding/paas/v4"} {
			t.Run(api.name+base, func(t *testing.T) {
				_, purl, rc := startProxy(t, Options{Upstream: up.URL + base, Key: testKey, APIs: api.apis})
				cases := append(append([]tc{}, api.cases...), common...)
				if base != "" {
					// Outside the base path, even with a model route.
					cases = append(cases, tc{"POST", "/../messages", false}, tc{"POST", "/../chat/completions", false})
				}
				// A route one API allows can be refused by another in the
				// union cases: the first verdict for a method and path wins.
				verdict := map[string]bool{}
				for _, c := range cases {
					if _, dup := verdict[c.method+" "+c.path]; !dup {
						verdict[c.method+" "+c.path] = c.ok
					}
				}
				for _, c := range cases {
					ok := verdict[c.method+" "+c.path]
					if api.name == "union" || api.name == "two" {
						ok = false
						for _, d := range api.cases {
							if d.method == c.method && d.path == c.path && d.ok {
								ok = true
							}
						}
					}
					if base+c.path == "" {
						continue // not a request line
					}
					before := hits.Load()
					code := rawStatus(t, purl, c.method, base+c.path)
					rec := rc.next(t)
					switch {
					case ok && (code != 200 || hits.Load() != before+1 || seen.Load() != base+c.path || rec.Denied):
						t.Errorf("%s %s%s: %d (upstream saw %v), want it forwarded; record %+v", c.method, base, c.path, code, seen.Load(), rec)
					case !ok && (code != 403 || hits.Load() != before || !rec.Denied || rec.Status != 403 ||
						!strings.HasPrefix(rec.Error, "route not allowed: "+c.method+" ")):
						t.Errorf("%s %s%s: %d, record %+v, want 403 and a Denied record", c.method, base, c.path, code, rec)
					}
				}
			})
		}
	}
}

// TestModelRoutesThroughProxy: the routes the CLIs call reach a real
// fakemodel with the real key, from a path-less and a /v1 base URL.
func TestModelRoutesThroughProxy(t *testing.T) {
	fm, err := fakemodel.New(fakemodel.Script{ExpectKey: testKey, Responses: []fakemodel.Step{{Text: "hi"}, {Text: "hi"}, {Text: "hi"}, {Text: "hi"}}}, fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fm.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	for _, tc := range []struct {
		base, method, path, place, body, want string
		api                                   API
	}{
		{"", "POST", "/v1/messages?beta=true", "X-Api-Key", `{"stream":true}`, "message_stop", APIAnthropicMessages},
		{"", "POST", "/v1/messages/count_tokens", "X-Api-Key", `{"model":"m","messages":[]}`, "input_tokens", APIAnthropicMessages},
		{"", "GET", "/v1/models", "X-Api-Key", "", "fake-model", APIAnthropicMessages},
		{"", "HEAD", "/api/hello", "X-Api-Key", "", "", APIAnthropicMessages},
		{"/v1", "POST", "/messages", "X-Api-Key", `{"stream":true}`, "message_stop", APIAnthropicMessages},
		{"/v1", "GET", "/models/fake-model", "Authorization", "", "fake-model", APIOpenAIChat},
		{"/v1", "POST", "/chat/completions", "Authorization", `{"stream":true}`, "[DONE]", APIOpenAIChat},
		{"/v1", "POST", "/responses", "Authorization", `{"stream":true}`, "response.completed", APIOpenAIResponses},
		{"", "POST", "/chat/completions", "Authorization", `{}`, `"usage"`, APIOpenAIChat},
	} {
		t.Run(tc.base+tc.path, func(t *testing.T) {
			_, purl, rc := startProxy(t, Options{Upstream: fm.URL() + tc.base, Key: testKey, APIs: []API{tc.api}})
			req := newReq(t, tc.method, purl+tc.base+tc.path, tc.body)
			withToken(req, tc.place, testToken)
			code, body := do(t, req)
			if code != 200 || !strings.Contains(body, tc.want) {
				t.Errorf("got %d %s", code, body)
			}
			if rec := rc.next(t); rec.Denied || rec.Error != "" {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func TestUpgradeRefused(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer up.Close()
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey})
	if code := rawStatus(t, purl, "POST", "/v1/messages", "Connection: Upgrade", "Upgrade: websocket"); code != 403 {
		t.Errorf("upgrade: %d", code)
	}
	if rec := rc.next(t); !rec.Denied || !strings.Contains(rec.Error, "upgrade") || hits.Load() != 0 {
		t.Errorf("record %+v, upstream hits %d", rec, hits.Load())
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, purl, rc := startProxy(t, Options{Upstream: "http://" + addr, Key: testKey})
	req := newReq(t, "POST", purl+"/v1/messages?key="+url.QueryEscape(testToken), "{}")
	code, body := do(t, req)
	var e struct {
		Error struct{ Type, Message string }
	}
	if code != 502 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "api_error" {
		t.Errorf("got %d %s", code, body)
	}
	if rec := rc.next(t); rec.Status != 502 || !strings.HasPrefix(rec.Error, "upstream: ") || !strings.Contains(rec.Error, "refused") {
		t.Errorf("record %+v", rec)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestNoSecretsInRecords drives every outcome through a proxy whose
// transport quotes the key (and its URL) in its error; recorder.next and
// do check each Record and body for the key and token.
func TestNoSecretsInRecords(t *testing.T) {
	var fail atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}\n\n")
	}))
	defer up.Close()
	leaky := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if fail.Load() {
			return nil, &url.Error{Op: "Post", URL: r.URL.String(),
				Err: errors.New("refused " + r.Header.Get("Authorization") + r.Header.Get("X-Api-Key") + " " + r.URL.RawQuery)}
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	_, purl, rc := startProxy(t, Options{Upstream: up.URL + "/v1", Key: testKey, Transport: leaky})
	for _, tc := range []struct {
		name, path, place string
		fail              bool
		code              int
	}{
		{"stream", "/v1/messages", "X-Api-Key", false, 200},
		{"query token", "/v1/responses", "key", false, 200},
		{"unknown token", "/v1/messages", "", false, 401},
		{"outside prefix", "/admin", "Authorization", false, 403},
		{"transport error bearer", "/v1/chat/completions", "Authorization", true, 502},
		{"transport error query", "/v1/chat/completions", "key", true, 502},
		{"transport error x-api-key", "/v1/chat/completions", "X-Api-Key", true, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail.Store(tc.fail)
			req := newReq(t, "POST", purl+tc.path, `{"stream":true}`)
			if tc.place != "" {
				withToken(req, tc.place, testToken)
			} else {
				withToken(req, "X-Api-Key", testToken+"x")
			}
			if code, _ := do(t, req); code != tc.code {
				t.Errorf("status %d, want %d", code, tc.code)
			}
			if rec := rc.next(t); rec.Status != tc.code || rec.Path != tc.path {
				t.Errorf("record %+v", rec)
			} else if tc.fail && !strings.Contains(rec.Error, "[REDACTED]") {
				t.Errorf("error not redacted: %q", rec.Error)
			}
		})
	}
}

func TestBytesCounted(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("y", int(n)*2))
	}))
	defer up.Close()
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey})
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(strings.Repeat("x", 12345))
		if chunked {
			body = struct{ io.Reader }{body} // unknown length: sent chunked
		}
		req, _ := http.NewRequest("POST", purl+"/v1/messages", body)
		withToken(req, "Authorization", testToken)
		code, got := do(t, req)
		if code != 200 || len(got) != 24690 {
			t.Fatalf("got %d, %d bytes", code, len(got))
		}
		rec := rc.next(t)
		if rec.BytesIn != 12345 || rec.BytesOut != 24690 || rec.Usage != nil || rec.FirstByteMS <= 0 || rec.DurationMS < rec.FirstByteMS {
			t.Errorf("chunked=%t: record %+v", chunked, rec)
		}
	}
}

func TestTLSUpstream(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secure") }))
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	up.StartTLS()
	defer up.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ca   string
		code int
	}{{caFile, 200}, {"", 502}} {
		_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey, CACertFile: tc.ca})
		req := newReq(t, "GET", purl+"/v1/models", "")
		withToken(req, "Authorization", testToken)
		if code, _ := do(t, req); code != tc.code {
			t.Errorf("CA %q: %d, want %d", tc.ca, code, tc.code)
		}
		if rec := rc.next(t); tc.code == 502 && !strings.Contains(rec.Error, "certificate") {
			t.Errorf("record %+v", rec)
		}
	}
}

func TestNewValidates(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	good := Options{Upstream: "https://api.openai.com/v1", Token: testToken}
	for _, tc := range []struct {
		name string
		mod  func(*Options)
	}{
		{"bad url", func(o *Options) { o.Upstream = "http://[::1" }},
		{"scheme", func(o *Options) { o.Upstream = "ftp://x/v1" }},
		{"no scheme", func(o *Options) { o.Upstream = "api.openai.com/v1" }},
		{"no host", func(o *Options) { o.Upstream = "http:///v1" }},
		{"user info", func(o *Options) { o.Upstream = "https://u:p@x/v1" }},
		{"user info, bad port", func(o *Options) { o.Upstream = "https://u:sk-SECRET@x:bad/" }},
		{"query", func(o *Options) { o.Upstream = "https://x/v1?key=1" }},
		{"short token", func(o *Options) { o.Token = "sa-proxy-short" }},
		{"key newline", func(o *Options) { o.Key = "sk\r\nX-Evil: 1" }},
		{"ca missing", func(o *Options) { o.CACertFile = filepath.Join(dir, "missing.pem") }},
		{"ca not pem", func(o *Options) { o.CACertFile = notPEM }},
		{"ca with transport", func(o *Options) { o.CACertFile, o.Transport = notPEM, http.DefaultTransport }},
		{"unknown api", func(o *Options) { o.APIs = []API{"openai-completions"} }},
		{"empty api", func(o *Options) { o.APIs = []API{APIOpenAIChat, ""} }},
	} {
		o := good
		tc.mod(&o)
		_, err := New(o)
		if err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, o)
		} else if strings.Contains(err.Error(), "sk-SECRET") || strings.Contains(err.Error(), "u:p@") {
			t.Errorf("%s: the error quotes the credential: %v", tc.name, err)
		}
	}
	if _, err := New(good); err != nil {
		t.Error(err)
	}
	if a, b := NewToken(), NewToken(); a == b || len(a) != 9+64 || !strings.HasPrefix(a, "sa-proxy-") {
		t.Errorf("NewToken: %q %q", a, b)
	}
}

// TestStreamNotBuffered: the upstream sends one event and then waits until
// the client has received it through the proxy. A buffering proxy would
// deadlock, caught by the timeout.
func TestStreamNotBuffered(t *testing.T) {
	for _, tc := range []struct{ name, first, rest string }{
		{"anthropic", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":11,\"output_tokens\":1}}}\n\n",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
		{"chat", "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n"},
		{"responses", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":11,\"output_tokens\":7}}}\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			received := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.first)
				http.NewResponseController(w).Flush()
				select {
				case <-received:
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Second):
					return
				}
				io.WriteString(w, tc.rest)
			}))
			defer up.Close()
			release := sync.OnceFunc(func() { close(received) })
			defer release() // before up.Close: let the handler finish on failure
			_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey})

			type result struct {
				first string
				br    *bufio.Reader
				body  io.Closer
				err   error
			}
			got := make(chan result, 1)
			go func() {
				req, _ := http.NewRequest("POST", purl+"/v1/messages", strings.NewReader(`{"stream":true}`))
				withToken(req, "Authorization", testToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					got <- result{err: err}
					return
				}
				br := bufio.NewReader(resp.Body)
				var first strings.Builder
				for !strings.HasSuffix(first.String(), "\n\n") && err == nil {
					var l string
					l, err = br.ReadString('\n')
					first.WriteString(l)
				}
				got <- result{first.String(), br, resp.Body, err}
			}()
			var res result
			select {
			case res = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("first event not received through the proxy within 5s: it buffers")
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			defer res.body.Close()
			release()
			if res.first != tc.first {
				t.Errorf("first event %q, want %q", res.first, tc.first)
			}
			rest, err := io.ReadAll(res.br)
			if err != nil || string(rest) != tc.rest {
				t.Errorf("rest %q, %v", rest, err)
			}
			rec := rc.next(t)
			if rec.Usage == nil || *rec.Usage != (Usage{InputTokens: 11, OutputTokens: 7}) || rec.BytesOut != int64(len(tc.first+tc.rest)) {
				t.Errorf("record %+v usage %v", rec, rec.Usage)
			}
		})
	}
}

// TestUsageFakemodel runs the three wire APIs of a real fakemodel, streamed
// and not, through the proxy; fakemodel checks the real key arrives.
func TestUsageFakemodel(t *testing.T) {
	const tools = `"tools":[{"type":"function","name":"noop","function":{"name":"noop","parameters":{"type":"object"}}}]`
	for _, tc := range []struct {
		name, path, place, body, end string
	}{
		{"anthropic stream", "/v1/messages", "X-Api-Key", `{"stream":true,` + tools + `}`, "message_stop"},
		{"anthropic json", "/v1/messages", "X-Api-Key", `{` + tools + `}`, `"usage"`},
		{"chat stream", "/v1/chat/completions", "Authorization", `{"stream":true,` + tools + `}`, "[DONE]"},
		{"chat stream include_usage", "/v1/chat/completions", "Authorization", `{"stream":true,"stream_options":{"include_usage":true},` + tools + `}`, "[DONE]"},
		{"chat json", "/v1/chat/completions", "Authorization", `{` + tools + `}`, `"usage"`},
		{"responses stream", "/v1/responses", "Authorization", `{"stream":true,` + tools + `}`, "response.completed"},
		{"responses json", "/v1/responses", "Authorization", `{` + tools + `}`, `"usage"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fm, err := fakemodel.New(fakemodel.Script{ExpectKey: testKey, Responses: []fakemodel.Step{
				{Text: "hello from the fake model", Usage: &fakemodel.Usage{InputTokens: 11, OutputTokens: 7}},
			}}, fakemodel.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := fm.Start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			defer fm.Close()
			p, purl, rc := startProxy(t, Options{Upstream: fm.URL() + "/v1", Key: testKey})
			req := newReq(t, "POST", p.BaseURL(purl)+strings.TrimPrefix(tc.path, "/v1"), tc.body)
			withToken(req, tc.place, testToken)
			code, body := do(t, req)
			if code != 200 || !strings.Contains(body, tc.end) {
				t.Fatalf("got %d %s", code, body)
			}
			if rec := rc.next(t); rec.Usage == nil || *rec.Usage != (Usage{InputTokens: 11, OutputTokens: 7}) || rec.BytesOut != int64(len(body)) {
				t.Errorf("record %+v usage %v", rec, rec.Usage)
			}
		})
	}
}

// TestUsageFixtures covers the scanner's edges with hand-written bodies.
func TestUsageFixtures(t *testing.T) {
	huge := `data: {"usage":{"input_tokens":999,"pad":"` + strings.Repeat("x", maxSSELine) + `"}}` + "\n\n"
	for _, tc := range []struct {
		name, ctype, body string
		want              *Usage
	}{
		{"sse crlf no space", "text/event-stream; charset=utf-8", "data:{\"usage\":{\"input_tokens\":5,\"output_tokens\":2}}\r\n\r\ndata:{\"usage\":{\"output_tokens\":9}}", &Usage{InputTokens: 5, OutputTokens: 9}},
		{"sse long line skipped", "text/event-stream", huge + "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", &Usage{InputTokens: 3, OutputTokens: 4}},
		{"sse no usage", "text/event-stream", "data: {\"usage\":null}\n\ndata: [DONE]\n\n", nil},
		{"json nested", "application/json", `{"a":[{"b":{"usage":{"input_tokens":8,"output_tokens":1}}}],"usage":{"output_tokens":6}}`, &Usage{InputTokens: 8, OutputTokens: 6}},
		{"json no usage", "application/json", `{"error":{"message":"rate limited"}}`, nil},
		{"json too large", "application/json", `{"usage":{"input_tokens":1},"pad":"` + strings.Repeat("x", maxJSONBody) + `"}`, nil},
		{"plain text", "text/plain", `{"usage":{"input_tokens":1}}`, nil},
		{"sse overlong line, usage at its end", "text/event-stream",
			`data: {"type":"response.completed","response":{"instructions":"` + strings.Repeat("i", maxSSELine) + `","usage":{"input_tokens":700,"output_tokens":30},"user":null}}` + "\n\n",
			&Usage{InputTokens: 700, OutputTokens: 30}},
		{"json too large, usage at its end", "application/json",
			`{"pad":"` + strings.Repeat("x", maxJSONBody) + `","usage":{"prompt_tokens":5,"completion_tokens":6}}`,
			&Usage{InputTokens: 5, OutputTokens: 6}},
		{"absurd counts ignored", "application/json", `{"usage":{"input_tokens":1e300,"output_tokens":-5}}`, nil},
		// Real shapes, with the prompt cache: each API's counts, normalized.
		{"anthropic stream cached", "text/event-stream", "event: message_start\n" +
			`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}` + "\n\n" +
			"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}` + "\n\n",
			&Usage{InputTokens: 2112, OutputTokens: 42, CacheReadTokens: 2000, CacheWriteTokens: 100}},
		{"chat stream cached", "text/event-stream",
			`data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-5.5","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
				`data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-5.5","choices":[],"usage":{"prompt_tokens":500,"completion_tokens":20,"total_tokens":520,"prompt_tokens_details":{"cached_tokens":384}}}` + "\n\ndata: [DONE]\n\n",
			&Usage{InputTokens: 500, OutputTokens: 20, CacheReadTokens: 384}},
		{"gateway: prompt_tokens with anthropic's cache fields", "application/json",
			`{"model":"m","usage":{"prompt_tokens":300,"completion_tokens":9,"cache_read_input_tokens":200,"prompt_tokens_details":{"cached_tokens":200}}}`,
			&Usage{InputTokens: 300, OutputTokens: 9, CacheReadTokens: 200}},
		{"deepseek cache hits", "application/json",
			`{"id":"d1","model":"deepseek-v4-flash","choices":[],"usage":{"prompt_tokens":300,"completion_tokens":9,"prompt_cache_hit_tokens":256,"prompt_cache_miss_tokens":44}}`,
			&Usage{InputTokens: 300, OutputTokens: 9, CacheReadTokens: 256}},
		{"responses completed cached", "text/event-stream",
			`data: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-5.5","usage":{"input_tokens":900,"input_tokens_details":{"cached_tokens":512},"output_tokens":60,"output_tokens_details":{"reasoning_tokens":40},"total_tokens":960}}}` + "\n\n",
			&Usage{InputTokens: 900, OutputTokens: 60, CacheReadTokens: 512}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				for b := tc.body; len(b) > 0; { // small writes split lines across reads
					n := min(len(b), 7+len(b)/3)
					io.WriteString(w, b[:n])
					http.NewResponseController(w).Flush()
					b = b[n:]
				}
			}))
			defer up.Close()
			_, purl, rc := startProxy(t, Options{Upstream: up.URL})
			req := newReq(t, "POST", purl+"/v1/messages", "{}")
			withToken(req, "Api-Key", testToken)
			if code, body := do(t, req); code != 200 || body != tc.body {
				t.Fatalf("got %d, body intact %t", code, body == tc.body)
			}
			rec := rc.next(t)
			if (rec.Usage == nil) != (tc.want == nil) || rec.Usage != nil && *rec.Usage != *tc.want {
				t.Errorf("usage %v, want %v", rec.Usage, tc.want)
			}
		})
	}
}

func TestClientCancelReachesUpstream(t *testing.T) {
	started, canceled := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a closed connection only once the body is read
		close(started)
		select {
		case <-r.Context().Done():
			close(canceled)
		case <-time.After(10 * time.Second):
		}
	}))
	defer up.Close()
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey})
	ctx, cancel := context.WithCancel(context.Background())
	req := newReq(t, "POST", purl+"/v1/messages", "{}").WithContext(ctx)
	withToken(req, "X-Api-Key", testToken)
	go func() {
		<-started
		cancel()
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request not canceled")
	}
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream request not canceled")
	}
	if rec := rc.next(t); rec.Error != "client canceled" {
		t.Errorf("record %+v", rec)
	}
}

// TestBodyClosedBeforeExcessCheck: the server closes a drained request body
// when the proxy starts answering; the transport's later read past
// Content-Length must then see EOF, or it drops the upstream connection
// mid-stream (seen as truncated streams in the benchmark).
func TestBodyClosedBeforeExcessCheck(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &countReader{rc: r.Body, size: r.ContentLength}
		io.Copy(io.Discard, c)
		io.WriteString(w, "answer") // makes the server close the body
		http.NewResponseController(w).Flush()
		_, err := c.Read(make([]byte, 1))
		got <- err
	}))
	defer srv.Close()
	do(t, newReq(t, "POST", srv.URL, "0123456789"))
	if err := <-got; err != io.EOF {
		t.Errorf("read after the server closed the body: %v, want EOF", err)
	}
}

// echoUpstream answers every request with its headers echoed as response
// headers, a 103 and trailers echoing them too, and an SSE body echoing
// the request's headers and body, then the key split at every position
// across two flushed writes.
func echoUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("X-Api-Key")
		w.Header().Set("Link", "<"+key+">")
		w.WriteHeader(http.StatusEarlyHints)
		for k, vs := range r.Header {
			w.Header()["Echo-"+k] = vs
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "Echo-Trailer")
		flush := func() { http.NewResponseController(w).Flush() }
		hb, _ := json.Marshal(r.Header)
		fmt.Fprintf(w, "data: %s\n\ndata: %s\n\n", hb, body)
		flush()
		for i := range len(key) + 1 {
			fmt.Fprintf(w, "data: %d %s", i, key[:i])
			flush()
			fmt.Fprintf(w, "%s\n\n", key[i:])
			flush()
		}
		w.Header().Set("Echo-Trailer", key)
	}))
	t.Cleanup(up.Close)
	return up
}

func TestEchoingUpstreamRedacted(t *testing.T) {
	up := echoUpstream(t)
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey})
	var early http.Header
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		early = http.Header(h).Clone()
		return nil
	}}
	req := newReq(t, "POST", purl+"/v1/messages?beta=true", `{"messages":[{"content":"my token is `+testToken+`"}]}`)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	withToken(req, "X-Api-Key", testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, "response body", string(b))
	for _, h := range []http.Header{resp.Header, resp.Trailer, early} {
		hb, _ := json.Marshal(h)
		noSecrets(t, "response headers", string(hb))
	}
	if resp.Header.Get("Echo-X-Api-Key") != redacted || resp.Trailer.Get("Echo-Trailer") != redacted || early.Get("Link") != "<"+redacted+">" {
		t.Errorf("echoed headers %v, trailers %v, 103 %v", resp.Header, resp.Trailer, early)
	}
	// Every split of the key came back as one [REDACTED], in its event.
	for i := range len(testKey) + 1 {
		if want := fmt.Sprintf("data: %d %s\n\n", i, redacted); !strings.Contains(string(b), want) {
			t.Errorf("missing %q", want)
		}
	}
	if !strings.Contains(string(b), "my token is "+redacted) {
		t.Errorf("the echoed request body: %s", b)
	}
	if rec := rc.next(t); rec.Status != 200 || rec.Error != "" || rec.BytesOut != int64(len(b)) {
		t.Errorf("record %+v (body %d bytes)", rec, len(b))
	}
}

// TestEchoWithContentLength: redaction changes the body's length, so the
// upstream's Content-Length must not reach the client.
func TestEchoWithContentLength(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := `{"error":{"message":"bad key ` + r.Header.Get("Authorization") + `"}}`
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		io.WriteString(w, body)
	}))
	defer up.Close()
	_, purl, rc := startProxy(t, Options{Upstream: up.URL + "/v1", Key: testKey})
	req := newReq(t, "POST", purl+"/v1/chat/completions", "{}")
	withToken(req, "Authorization", testToken)
	if code, body := do(t, req); code != 200 || body != `{"error":{"message":"bad key Bearer `+redacted+`"}}` {
		t.Errorf("got %d %s", code, body)
	}
	if rec := rc.next(t); rec.Error != "" {
		t.Errorf("record %+v", rec)
	}
}

// tapRec is an Exchange that records what it saw and checks the order
// and that no two calls overlap.
type tapRec struct {
	mu               sync.Mutex
	calls            []string
	req, resp        bytes.Buffer
	status           int
	header           http.Header
	err              error
	ends             int
	overlap, badTurn bool
	inCall           atomic.Int32
}

func (x *tapRec) enter(call string) func() {
	if x.inCall.Add(1) != 1 {
		x.overlap = true
	}
	x.mu.Lock()
	if x.ends > 0 || call != "req" && call != "resp" && len(x.calls) == 0 && call != "end" {
		x.badTurn = true
	}
	if call == "body" && !slices.Contains(x.calls, "resp") {
		x.badTurn = true
	}
	x.calls = append(x.calls, call)
	return func() { x.mu.Unlock(); x.inCall.Add(-1) }
}

func (x *tapRec) RequestBody(p []byte) { defer x.enter("req")(); x.req.Write(p) }
func (x *tapRec) Response(status int, h http.Header) {
	defer x.enter("resp")()
	x.status, x.header = status, h
}
func (x *tapRec) ResponseBody(p []byte) { defer x.enter("body")(); x.resp.Write(p) }
func (x *tapRec) End(err error) {
	defer x.enter("end")()
	x.ends++
	x.err = err
}

func (x *tapRec) respBody() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.resp.String()
}

// TestTap: the tap sees the request body and the raw response body whole
// and in order, each response chunk before the client can read it, and
// End once, last.
func TestTap(t *testing.T) {
	const first = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
	received := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, first)
		http.NewResponseController(w).Flush()
		select {
		case <-received:
		case <-time.After(5 * time.Second):
		}
		fmt.Fprintf(w, "data: %d bytes, key %s\n\n", len(body), r.Header.Get("X-Api-Key"))
	}))
	defer up.Close()
	var taps []*tapRec
	var tapped []string
	tap := func(method, path string) Exchange {
		x := &tapRec{}
		taps, tapped = append(taps, x), append(tapped, method+" "+path)
		return x
	}
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey, Tap: tap})

	// The body goes out in pieces (chunked).
	pr, pw := io.Pipe()
	var sent strings.Builder
	go func() {
		for i := range 50 {
			s := fmt.Sprintf("{\"part\":%d,\"pad\":%q}\n", i, strings.Repeat("x", i*97))
			sent.WriteString(s)
			io.WriteString(pw, s)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", purl+"/v1/messages", pr)
	withToken(req, "X-Api-Key", testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	for !strings.HasSuffix(got.String(), "\n\n") {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(l)
	}
	// The client has the first event: the tap had it before.
	if len(taps) != 1 || taps[0].respBody() != first {
		t.Fatalf("when the client read the first event the tap had %q", taps[0].respBody())
	}
	close(received)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, "response body", string(rest))
	rc.next(t) // Log comes after End
	x := taps[0]
	x.mu.Lock()
	defer x.mu.Unlock()
	raw := first + fmt.Sprintf("data: %d bytes, key %s\n\n", sent.Len(), testKey)
	switch {
	case tapped[0] != "POST /v1/messages":
		t.Errorf("Tap called with %q", tapped[0])
	case x.req.String() != sent.String():
		t.Errorf("request body seen %d bytes, sent %d", x.req.Len(), sent.Len())
	case x.resp.String() != raw:
		t.Errorf("response body seen %q, want the raw %q", x.resp.String(), raw)
	case x.status != 200 || x.header.Get("Content-Type") != "text/event-stream":
		t.Errorf("Response(%d, %v)", x.status, x.header)
	case x.ends != 1 || x.err != nil || x.calls[len(x.calls)-1] != "end":
		t.Errorf("End called %d times, err %v, calls %v", x.ends, x.err, x.calls)
	case x.overlap || x.badTurn:
		t.Errorf("calls overlapped (%t) or out of order: %v", x.overlap, x.calls)
	}
}

// TestTapNotCalledForRefused: no Tap for a bad token or a refused route;
// a nil Exchange forwards normally; an unreachable upstream ends with an
// error and no Response.
func TestTapNotCalledForRefused(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	var calls atomic.Int32
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey, Tap: func(string, string) Exchange {
		calls.Add(1)
		return nil
	}})
	for _, tc := range []struct {
		path, tok string
		code      int
		tapped    bool
	}{
		{"/v1/messages", NewToken(), 401, false},
		{"/key/generate", testToken, 403, false},
		{"/v1/messages", testToken, 200, true},
	} {
		before := calls.Load()
		req := newReq(t, "POST", purl+tc.path, "{}")
		withToken(req, "X-Api-Key", tc.tok)
		if code, _ := do(t, req); code != tc.code {
			t.Errorf("%s: %d", tc.path, code)
		}
		rc.next(t)
		if (calls.Load() > before) != tc.tapped {
			t.Errorf("%s: tapped %t", tc.path, calls.Load() > before)
		}
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := ln.Addr().String()
	ln.Close()
	x := &tapRec{}
	_, purl, rc = startProxy(t, Options{Upstream: "http://" + down, Key: testKey, Tap: func(string, string) Exchange { return x }})
	req := newReq(t, "POST", purl+"/v1/messages", "{}")
	withToken(req, "X-Api-Key", testToken)
	if code, _ := do(t, req); code != 502 {
		t.Errorf("down: %d", code)
	}
	rc.next(t)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ends != 1 || x.err == nil || !strings.HasPrefix(x.err.Error(), "upstream: ") || slices.Contains(x.calls, "resp") {
		t.Errorf("down: calls %v, err %v", x.calls, x.err)
	}
	noSecrets(t, "End's error", x.err.Error())
}

// TestTapEndIsLast: the upstream answers without reading the request
// body, which the client keeps sending; whatever the transport still
// reads after the exchange ended is not passed on after End.
func TestTapEndIsLast(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "early") }))
	defer up.Close()
	x := &tapRec{}
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Key: testKey, Tap: func(string, string) Exchange { return x }})
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			if _, err := pw.Write(bytes.Repeat([]byte("y"), 4096)); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", purl+"/v1/messages", pr)
	withToken(req, "X-Api-Key", testToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rc.next(t)
	pw.CloseWithError(errors.New("test over"))
	<-done
	time.Sleep(50 * time.Millisecond) // let a late transport read happen
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ends != 1 || x.badTurn || x.overlap || x.calls[len(x.calls)-1] != "end" {
		t.Errorf("calls %v (bad order %t, overlap %t)", x.calls, x.badTurn, x.overlap)
	}
}

// The record names the model the response named: the first valid one.
func TestUsageModel(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"type":"message_start","message":{"model":"claude-sonnet-4-5","usage":{"input_tokens":1}}}`, "claude-sonnet-4-5"},
		{`{"type":"response.completed","response":{"model":"gpt-5.5","usage":{"input_tokens":1}}}`, "gpt-5.5"},
		{`{"model":"has space","usage":{"input_tokens":1}}`, ""},
		{`{"model":"esc\u001b[31m","usage":{"input_tokens":1}}`, ""},
		{`{"model":"` + strings.Repeat("m", 129) + `","usage":{"input_tokens":1}}`, ""},
	} {
		s := &usageScanner{}
		s.write([]byte(tc.body))
		if _, got := s.finish(); got != tc.want {
			t.Errorf("%s: model %q, want %q", tc.body, got, tc.want)
		}
	}
}

// A budget: the proxy charges each response's usage and, once the budget
// is spent, answers 402 itself; the upstream never sees the request.
// Raising the budget lets the next one through.
func TestBudget(t *testing.T) {
	var forwarded atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"m-20261201","usage":{"input_tokens":30,"output_tokens":20}}`)
	}))
	defer up.Close()
	meter, err := metering.NewMeter(metering.MeterOptions{Budget: metering.Budget{Tokens: 100}, Prices: metering.Prices{"m": {Input: 1, Output: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Meter: meter})
	post := func() (int, string) {
		req := newReq(t, "POST", purl+"/v1/messages", "{}")
		withToken(req, "X-Api-Key", testToken)
		return do(t, req)
	}
	for i := range 2 { // 50 tokens each: the second reaches the budget
		if code, _ := post(); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
		if rec := rc.next(t); rec.Budget || rec.Model != "m-20261201" {
			t.Fatalf("record %+v", rec)
		}
	}
	code, body := post()
	rec := rc.next(t)
	if code != http.StatusPaymentRequired || !strings.Contains(body, "budget exceeded") || strings.ContainsAny(body, "0123456789") ||
		!strings.Contains(rec.Error, "100 of 100 tokens used") || !rec.Budget || forwarded.Load() != 2 {
		t.Fatalf("past the budget: %d %s, record %+v, upstream saw %d requests", code, body, rec, forwarded.Load())
	}
	// Listing models and counting tokens cost nothing: not refused.
	for _, r := range []*http.Request{newReq(t, "GET", purl+"/v1/models", ""), newReq(t, "POST", purl+"/v1/messages/count_tokens", "{}")} {
		withToken(r, "X-Api-Key", testToken)
		if code, _ := do(t, r); code != 200 {
			t.Errorf("%s %s refused: %d", r.Method, r.URL.Path, code)
		}
		rc.next(t)
	}
	if s := meter.Spent(); s.Usage.Tokens() != 100 || s.CostUSD != 100.0/1e6 || s.Requests != 2 {
		t.Errorf("spent %+v", s) // the two completions; the free ones are not charged, whatever the upstream reports
	}
	if err := meter.SetBudget(metering.Budget{Tokens: 1000}); err != nil {
		t.Fatal(err)
	}
	if code, _ := post(); code != 200 {
		t.Fatalf("after raising the budget: %d", code)
	}
	rc.next(t)
}

// A Settle that times out leaves no waiter behind.
func TestSettleTimeout(t *testing.T) {
	p := &Proxy{}
	p.begin()
	if p.Settle(10 * time.Millisecond) {
		t.Fatal("settled with a request open")
	}
	p.activeMu.Lock()
	n := len(p.idle)
	p.activeMu.Unlock()
	if n != 0 {
		t.Errorf("%d waiters left", n)
	}
	done := make(chan bool)
	go func() { done <- p.Settle(5 * time.Second) }()
	time.Sleep(10 * time.Millisecond)
	p.end()
	if !<-done {
		t.Error("did not settle when the request ended")
	}
}

// A response without a usage the proxy can read is charged an estimate
// from its bytes: a sandbox cannot get answers for free by asking for a
// stream without usage, or by leaving before the last event.
func TestBudgetChargesUnmeasured(t *testing.T) {
	body := strings.Repeat("x", 4000)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\""+body+"\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	meter, err := metering.NewMeter(metering.MeterOptions{Budget: metering.Budget{Tokens: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	_, purl, rc := startProxy(t, Options{Upstream: up.URL, Meter: meter})
	req := newReq(t, "POST", purl+"/chat/completions", `{"stream":true}`)
	withToken(req, "Authorization", testToken)
	if code, _ := do(t, req); code != 200 {
		t.Fatalf("status %d", code)
	}
	rec := rc.next(t)
	if !rec.Estimated || rec.Usage == nil || rec.Usage.OutputTokens < 1000 {
		t.Errorf("record %+v", rec)
	}
	if s := meter.Spent(); s.Usage.OutputTokens < 1000 || s.Requests != 1 {
		t.Errorf("spent %+v: want at least 1000 output tokens estimated from 4 KB", s)
	}
	req = newReq(t, "POST", purl+"/chat/completions", `{"stream":true}`)
	withToken(req, "Authorization", testToken)
	if code, _ := do(t, req); code != http.StatusPaymentRequired {
		t.Errorf("the estimate did not count against the budget: %d", code)
	}
}

// A stream cut short is charged the output that passed, from its bytes,
// when the usage seen so far says less: Anthropic's message_start
// reports the input and one output token, and a sandbox that leaves
// after the text (or an upstream that breaks off) must not get that
// text for one token.
func TestBudgetChargesCutStreams(t *testing.T) {
	text := strings.Repeat("x", 4000)
	head := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	for _, tc := range []struct {
		name  string
		leave bool // the client leaves after the text; else the upstream breaks off
	}{{"client leaves", true}, {"upstream breaks off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, head)
				w.(http.Flusher).Flush()
				if tc.leave {
					<-r.Context().Done()
					return
				}
				panic(http.ErrAbortHandler)
			}))
			defer up.Close()
			meter, err := metering.NewMeter(metering.MeterOptions{Budget: metering.Budget{Tokens: 1_000_000}})
			if err != nil {
				t.Fatal(err)
			}
			_, purl, rc := startProxy(t, Options{Upstream: up.URL, Meter: meter})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := newReq(t, "POST", purl+"/v1/messages", `{"stream":true}`).WithContext(ctx)
			withToken(req, "X-Api-Key", testToken)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(res.Body, make([]byte, len(head)-10)); err != nil {
				t.Fatal(err)
			}
			if tc.leave {
				cancel()
			} else {
				io.Copy(io.Discard, res.Body)
			}
			res.Body.Close()
			rec := rc.next(t)
			if rec.Usage == nil || !rec.Estimated || rec.Usage.InputTokens != 10 || rec.Usage.OutputTokens < 1000 {
				t.Fatalf("record %+v usage %+v: want the input reported and at least 1000 output tokens from 4 KB", rec, rec.Usage)
			}
			if s := meter.Spent(); s.Usage.OutputTokens != rec.Usage.OutputTokens || s.Usage.InputTokens != 10 {
				t.Errorf("spent %+v, want the record's usage %+v", s, rec.Usage)
			}
		})
	}
}

// A complete stream of each wire API keeps the usage it reported (no
// estimate); one that ends in an error event after its text, though the
// connection closes cleanly, is charged its output from the bytes.
func TestBudgetFinalEvents(t *testing.T) {
	text := strings.Repeat("x", 4000)
	anthropicHead := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	big := strings.Repeat("y", 2<<20) // past the scanner's line and body bounds
	for _, tc := range []struct {
		name, path, body string
		wantOut          int64 // exact; 0: estimated, at least 1000
		json             bool  // an application/json body, not a stream
	}{
		{"anthropic complete", "/v1/messages", anthropicHead +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":12}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 12, false},
		{"anthropic complete, no event lines", "/v1/messages", strings.ReplaceAll(anthropicHead, "event: content_block_delta\n", "") +
			"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":12}}\n\n", 12, false},
		{"anthropic error event", "/v1/messages", anthropicHead +
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", 0, false},
		{"chat complete", "/chat/completions", "data: {\"choices\":[{\"delta\":{\"content\":\"" + text + "\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":12}}\n\ndata: [DONE]\n\n", 12, false},
		{"responses complete", "/responses", "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + text + "\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":12}}}\n\n", 12, false},
		{"anthropic cut after message_delta's event line", "/v1/messages", anthropicHead + "event: message_delta\n", 0, false},
		{"chat with a usage on every chunk, cut", "/chat/completions",
			"data: {\"choices\":[{\"delta\":{\"content\":\"" + text + "\"}}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\n", 0, false},
		{"responses with a huge completed event", "/responses", "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + text + "\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"" + big + "\",\"usage\":{\"input_tokens\":10,\"output_tokens\":12}}}\n\n", 12, false},
		{"a huge JSON body", "/v1/messages", "{\"content\":[{\"type\":\"text\",\"text\":\"" + big + big + big + "\"}],\"usage\":{\"input_tokens\":10,\"output_tokens\":12}}", 12, true},
		{"responses cut after the text", "/responses", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":0}}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + text + "\"}\n\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				if tc.json {
					w.Header().Set("Content-Type", "application/json")
				}
				io.WriteString(w, tc.body)
			}))
			defer up.Close()
			meter, err := metering.NewMeter(metering.MeterOptions{Budget: metering.Budget{Tokens: 1_000_000}})
			if err != nil {
				t.Fatal(err)
			}
			_, purl, rc := startProxy(t, Options{Upstream: up.URL, Meter: meter})
			req := newReq(t, "POST", purl+tc.path, `{"stream":true}`)
			withToken(req, "Authorization", testToken)
			withToken(req, "X-Api-Key", testToken)
			if code, _ := do(t, req); code != 200 {
				t.Fatalf("status %d", code)
			}
			rec := rc.next(t)
			switch {
			case rec.Usage == nil || rec.Usage.InputTokens != 10:
				t.Errorf("record %+v: want the reported input, 10", rec)
			case tc.wantOut > 0 && (rec.Estimated || rec.Usage.OutputTokens != tc.wantOut):
				t.Errorf("a complete stream: estimated %v, output %d, want the reported %d", rec.Estimated, rec.Usage.OutputTokens, tc.wantOut)
			case tc.wantOut == 0 && (!rec.Estimated || rec.Usage.OutputTokens < 1000):
				t.Errorf("a stream without its end: estimated %v, output %d, want at least 1000 from 4 KB", rec.Estimated, rec.Usage.OutputTokens)
			}
		})
	}
}
