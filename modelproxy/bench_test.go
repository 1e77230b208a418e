package modelproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/metering"
)

// The benchmarks stream the same chat-completions SSE answer (about 1 KiB
// of text in 32 deltas) from a fakemodel on loopback, directly, through a
// Proxy served on a Unix socket, as deployed, and through one that meters
// each request against a budget (Admit, the usage's charge).
func BenchmarkStreamDirect(b *testing.B)          { benchStream(b, false, false) }
func BenchmarkStreamViaProxy(b *testing.B)        { benchStream(b, true, false) }
func BenchmarkStreamViaProxyMetered(b *testing.B) { benchStream(b, true, true) }

func benchStream(b *testing.B, viaProxy, metered bool) {
	fm := textModel(b, b.N)

	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	url, cred := fm.URL()+"/v1/chat/completions", testKey
	if viaProxy {
		var meter *metering.Meter
		if metered {
			var err error
			if meter, err = metering.NewMeter(metering.MeterOptions{Prices: metering.DefaultPrices(), Budget: metering.Budget{Tokens: 1 << 50}}); err != nil {
				b.Fatal(err)
			}
		}
		p, err := New(Options{Upstream: fm.URL() + "/v1", Key: testKey, Token: testToken, Meter: meter, Log: func(r Record) {
			if r.Error != "" || metered && (r.Usage == nil || r.Estimated) {
				b.Errorf("proxy: %+v", r)
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		tr.DialContext = serveUnix(b, p)
		url, cred = p.BaseURL("http://sandbox-proxy")+"/chat/completions", testToken
	}
	client := &http.Client{Transport: tr}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"type":"function","function":{"name":"noop","parameters":{"type":"object"}}}]}`

	first, last := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cred)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				b.Fatalf("status %d: no data line: %v", resp.StatusCode, err)
			}
			if strings.HasPrefix(l, "data:") {
				break
			}
		}
		first = append(first, time.Since(start))
		rest, err := io.ReadAll(br)
		last = append(last, time.Since(start))
		resp.Body.Close()
		if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
			b.Fatal("incomplete stream", err, errors.New(string(rest)))
		}
	}
	b.StopTimer()
	report := func(name string, ds []time.Duration) {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		slices.Sort(ds)
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		b.ReportMetric(us(sum)/float64(len(ds)), name+"-µs")
		b.ReportMetric(us(ds[len(ds)/2]), "p50-"+name+"-µs")
	}
	report("first-byte", first)
	report("last-byte", last)
}

// textModel is a fakemodel on loopback answering n requests, each with
// about 1 KiB of text (32 deltas when streamed).
func textModel(b *testing.B, n int) *fakemodel.Server {
	text := strings.Repeat("lorem ipsum ", 90)
	steps := make([]fakemodel.Step, n) // one per request, so every answer is the full text
	for i := range steps {
		steps[i] = fakemodel.Step{Text: text}
	}
	fm, err := fakemodel.New(fakemodel.Script{ExpectKey: testKey, Responses: steps}, fakemodel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := fm.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fm.Close() })
	return fm
}

// serveUnix serves h on a Unix socket, as deployed, and returns a dialer
// for it.
func serveUnix(b *testing.B, h http.Handler) func(context.Context, string, string) (net.Conn, error) {
	sock := filepath.Join(b.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
}
