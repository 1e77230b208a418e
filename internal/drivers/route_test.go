package drivers

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// Every driver's model route, through a real model proxy: the CLI's model
// API is forwarded (with the key), a gateway's other routes are refused
// with 403 and never reach it — also with claude's path-less base URL,
// where the upstream's whole host sits below the base.
func TestModelRoutesRefuseTheRest(t *testing.T) {
	const key, token = "sk-real-key-0123456789", "sa-proxy-0123456789abcdef0123456789abcdef"
	var hits atomic.Int64
	var gotKey atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gotKey.Store(r.Header.Get("Authorization") + r.Header.Get("X-Api-Key"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}))
	defer up.Close()

	type tc struct{ name, base string }
	var cases []tc
	for _, n := range Names() {
		cases = append(cases, tc{n, up.URL + "/v1"})
	}
	cases = append(cases, tc{"claude", up.URL}) // claude's default: no path
	for _, c := range cases {
		t.Run(c.name+" "+strings.TrimPrefix(c.base, up.URL), func(t *testing.T) {
			drv, err := New(c.name, Endpoint{BaseURL: c.base, APIKey: key, Provider: "sandbox"})
			if err != nil {
				t.Fatal(err)
			}
			route, err := drv.(sandboxagent.ModelRouter).ModelRoute()
			if err != nil {
				t.Fatal(err)
			}
			if len(route.APIs) == 0 {
				t.Fatal("the route names no wire API")
			}
			apis := make([]modelproxy.API, len(route.APIs))
			for i, a := range route.APIs {
				apis[i] = modelproxy.API(a)
			}
			p, err := modelproxy.New(modelproxy.Options{Upstream: route.Upstream, Key: route.Key, Token: token, APIs: apis})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			defer srv.Close()
			base, _ := url.Parse(p.BaseURL(srv.URL))
			bp := base.Path

			// Positive controls: the model routes of the driver's APIs.
			for _, a := range route.APIs {
				var path string
				switch modelproxy.API(a) {
				case modelproxy.APIAnthropicMessages:
					path = bp + "/messages"
					if bp == "" {
						path = "/v1/messages"
					}
				case modelproxy.APIOpenAIChat:
					path = bp + "/chat/completions"
				case modelproxy.APIOpenAIResponses:
					path = bp + "/responses"
				default:
					t.Fatalf("unknown API %q", a)
				}
				before := hits.Load()
				if st := send(t, srv.URL, "POST", path, token); st != http.StatusOK || hits.Load() != before+1 {
					t.Errorf("POST %s: status %d, upstream hits %d: the model route must be forwarded", path, st, hits.Load()-before)
				}
				if k, _ := gotKey.Load().(string); !strings.Contains(k, key) {
					t.Errorf("POST %s reached the upstream without the key", path)
				}
			}
			// Everything else: 403, never forwarded.
			for _, path := range []string{
				"/key/generate", "/admin/x", bp + "/key/generate", bp + "/admin/x",
				"/v1/messages/../../key/generate", bp + "/../key/generate", bp + "/%2e%2e/key/generate",
				bp + "//key/generate", bp + "/models/../key/generate", "/",
			} {
				before := hits.Load()
				st := send(t, srv.URL, "POST", path, token)
				if st != http.StatusForbidden {
					t.Errorf("POST %s: status %d, want 403", path, st)
				}
				if hits.Load() != before {
					t.Errorf("POST %s reached the upstream", path)
				}
			}
		})
	}
}

// send writes a raw request line, so the path reaches the proxy exactly
// as given (no client-side cleaning), and returns the status.
func send(t *testing.T, base, method, path, token string) int {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nx-api-key: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", method, path, u.Host, token, token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
