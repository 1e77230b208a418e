package trajectory

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// capturedReq is one captured CLI request (the mocks' log format).
type capturedReq struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func (c capturedReq) hasTools() bool {
	var b struct {
		Tools []json.RawMessage `json:"tools"`
	}
	_ = json.Unmarshal(c.Body, &b)
	return len(b.Tools) > 0
}

func loadCaptured(t testing.TB, name string) []capturedReq {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "requests", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []capturedReq
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if !strings.HasSuffix(name, ".jsonl") {
			line = data
		}
		var c capturedReq
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, c)
		if !strings.HasSuffix(name, ".jsonl") {
			break
		}
	}
	return out
}

// wire is one exchange as the proxy would see it.
type wire struct {
	method, path string
	req          []byte
	status       int
	header       http.Header
	resp         []byte
}

// post sends body to the fake and returns the exchange's raw bytes.
func post(t testing.TB, base, path string, body []byte, header map[string]string) wire {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return wire{method: http.MethodPost, path: path, req: body, status: res.StatusCode, header: res.Header, resp: b}
}

// chunks splits b at random points (sizes 1 to max).
func chunks(rng *rand.Rand, b []byte, max int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), 1+rng.IntN(max))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// play feeds w through r as the proxy's tap would: the request from
// another goroutine, the response in random chunks (each copied into a
// scratch buffer that is then overwritten, to catch retained slices).
func play(r *Record, w wire, rng *rand.Rand) *Exchange {
	x := r.Begin(w.method, w.path)
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, c := range chunks(rng, w.req, 4096) {
			scratch(x.RequestBody, c)
		}
	})
	wg.Wait() // a proxy forwards the whole request before the answer
	x.Response(w.status, w.header)
	for _, c := range chunks(rng, w.resp, 97) {
		scratch(x.ResponseBody, c)
	}
	x.End(nil)
	return x
}

// scratch hands f a copy of c that is clobbered right after, as a proxy
// reuses its buffer: a parser that retained it would see garbage.
func scratch(f func([]byte), c []byte) {
	b := append([]byte(nil), c...)
	f(b)
	for i := range b {
		b[i] = 'X'
	}
}

func setJSON(t testing.TB, body json.RawMessage, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
