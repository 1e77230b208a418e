package modelproxy

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/trajectory"
)

// BenchmarkTrajectory measures what recording the turn's trajectory
// (trajectory.Record on the proxy's Tap) adds to a request: one proxy with
// the tap and one without, in front of the same fakemodel, take turns at
// the same streamed chat completion (a 100 KB conversation with a tool
// result in, about 1 KiB of text in 32 deltas out). It reports the p50 of
// each and the p50 of the paired differences (with minus without, per
// round), so machine noise between rounds cancels out:
//
//	go test -run '^$' -bench Trajectory -benchtime 400x ./modelproxy/
func BenchmarkTrajectory(b *testing.B) {
	fm := textModel(b, 2*b.N+2)

	rec := &trajectory.Record{}
	serve := func(tap bool) *http.Client {
		o := Options{Upstream: fm.URL() + "/v1", Key: testKey, Token: testToken}
		if tap {
			o.Tap = func(method, path string) Exchange {
				if x := rec.Begin(method, path); x != nil {
					return x
				}
				return nil
			}
		}
		p, err := New(o)
		if err != nil {
			b.Fatal(err)
		}
		tr := &http.Transport{DisableCompression: true, DialContext: serveUnix(b, p)}
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	on, off := serve(true), serve(false)
	history := strings.Repeat(`{"role":"user","content":"`+strings.Repeat("history ", 120)+`"},`, 100)
	body := `{"model":"m","stream":true,"messages":[` + history +
		`{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"a\nb\n"}],` +
		`"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]}`
	do := func(c *http.Client) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("POST", "http://sandbox-proxy/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
			b.Fatalf("incomplete stream: %v", err)
		}
		return time.Since(start)
	}
	do(on) // warm both connections
	do(off)
	var withTap, without, diff []time.Duration
	b.ResetTimer()
	for i := range b.N {
		var a, c time.Duration
		if i%2 == 0 { // alternate the order: neither always goes first
			a, c = do(on), do(off)
		} else {
			c, a = do(off), do(on)
		}
		withTap, without, diff = append(withTap, a), append(without, c), append(diff, a-c)
	}
	b.StopTimer()
	if rec.Exchanges() == 0 {
		b.Fatal("the tap recorded nothing")
	}
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / float64(time.Microsecond)
	}
	on50, off50 := p50(withTap), p50(without)
	b.ReportMetric(on50, "p50-tap-µs")
	b.ReportMetric(off50, "p50-notap-µs")
	b.ReportMetric(p50(diff), "p50-added-µs")
	b.ReportMetric(on50/off50, "ratio")
}
