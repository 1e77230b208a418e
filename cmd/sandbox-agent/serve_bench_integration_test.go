//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/server"
)

// BenchmarkServeTurn puts a turn through the HTTP API beside the same turn
// through the Go API, on one agent: serve's handler on a loopback
// listener, its Starter the one serve uses, and the agent it started also
// driven directly with Agent.Stream, the two interleaved. The driver is pi
// (long-lived: its turns take milliseconds, so the server's share shows;
// SANDBOX_AGENT_SERVE_BENCH_DRIVER picks another). It runs on serve's two
// kinds of state: state=memory (SQLite in memory: what the server adds
// without a disk) and state=file (the default, a SQLite file: what
// durability adds on top). The metrics are the p50 of each path and the
// p50 of the paired differences, the latency the server adds: JSON
// answer, and the event stream.
func BenchmarkServeTurn(b *testing.B) {
	for _, kind := range []string{"memory", "file"} {
		b.Run("state="+kind, func(b *testing.B) {
			path := memoryState
			if kind == "file" {
				path = filepath.Join(b.TempDir(), "state.db")
			}
			benchServeTurn(b, path)
		})
	}
}

func benchServeTurn(b *testing.B, statePath string) {
	driver := envOr("SANDBOX_AGENT_SERVE_BENCH_DRIVER", "pi")
	const turns = 100
	for b.Loop() {
		a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: srvGetenv(b), red: &redactor{}}
		cfg, cli, err := loadConfig("/nonexistent/sandbox-agent-test-config.json", a.getenv)
		if err != nil {
			b.Fatal(err)
		}
		a.cfg, a.cli = cfg, cli
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		var ag *sandboxagent.Agent
		so, err := a.serveStarter(ctx, false, "", "bench")
		if err != nil {
			b.Fatal(err)
		}
		start := server.NewStarter(so)
		st, err := openState(ctx, statePath, true)
		if err != nil {
			b.Fatal(err)
		}
		srv, err := server.New(server.Options{Token: strings.Repeat("t", 32), Store: st, Exclusive: true, Start: func(ctx context.Context, req server.CreateRequest) (*sandboxagent.Agent, func(), error) {
			got, stop, err := start(ctx, req)
			ag = got
			return got, stop, err
		}})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hs := &http.Server{Handler: srv.Handler()}
		go func() { _ = hs.Serve(ln) }()
		c := &serveProc{base: "http://" + ln.Addr().String(), token: strings.Repeat("t", 32), stderr: &lockedBuffer{}, client: &http.Client{}}
		id := c.create(b, map[string]any{"driver": driver, "fake_model_script": map[string]any{"responses": []any{}}}) // every turn: the fake model's DONE

		var goAPI, httpJSON, httpSSE, addJSON, addSSE []time.Duration
		for i := 0; i < turns+2; i++ {
			t0 := time.Now()
			if _, err := ag.Stream(ctx, "turn "+strconv.Itoa(i), nil); err != nil {
				b.Fatal(err)
			}
			d0 := time.Since(t0)
			t1 := time.Now()
			resp, out := c.do(b, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "turn " + strconv.Itoa(i)})
			d1 := time.Since(t1)
			if resp.StatusCode != 200 {
				b.Fatalf("turn over HTTP: %d %s", resp.StatusCode, out)
			}
			t2 := time.Now()
			resp, out = c.do(b, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "stream " + strconv.Itoa(i)}, "Accept: text/event-stream")
			d2 := time.Since(t2)
			if resp.StatusCode != 200 || !strings.Contains(string(out), "event: result") {
				b.Fatalf("streamed turn over HTTP: %d %.300s", resp.StatusCode, out)
			}
			if i >= 2 { // the first turns start the CLI
				goAPI, httpJSON, httpSSE = append(goAPI, d0), append(httpJSON, d1), append(httpSSE, d2)
				addJSON, addSSE = append(addJSON, d1-d0), append(addSSE, d2-d0)
			}
		}
		_ = hs.Close()
		if err := srv.Close(ctx); err != nil {
			b.Error(err)
		}
		st.Close()
		cancel()
		a.eng.close()
		b.ReportMetric(ms(p50(goAPI)), "go-p50-ms")
		b.ReportMetric(ms(p50(httpJSON)), "http-p50-ms")
		b.ReportMetric(ms(p50(httpSSE)), "sse-p50-ms")
		b.ReportMetric(ms(p50(addJSON)), "added-p50-ms")
		b.ReportMetric(ms(p50(addSSE)), "added-sse-p50-ms")
	}
}

// BenchmarkServeReadopt: SANDBOX_AGENT_SERVE_SCALE_N agents (default 50)
// are created through a serve on a SQLite state, each runs a turn, the
// serve is SIGKILLed, and a new serve starts on the same state. The
// metrics, from the new serve's start: answer-s, until every agent
// answers a GET as idle (the store answers while its sandbox is being
// adopted), readopt-s, until the serve logged every sandbox adopted, and
// its ratio to exec-floor-s, one exec of true in each sandbox through the
// same serve, 8 at a time as Recover adopts.
// Then each agent runs one more turn, which must work (any failure fails
// the benchmark). SANDBOX_AGENT_SCALE_DRIVER (default codex) picks the
// driver.
func BenchmarkServeReadopt(b *testing.B) {
	n, err := strconv.Atoi(envOr("SANDBOX_AGENT_SERVE_SCALE_N", "50"))
	if err != nil || n < 1 {
		b.Fatalf("SANDBOX_AGENT_SERVE_SCALE_N: %v", err)
	}
	driver := envOr("SANDBOX_AGENT_SCALE_DRIVER", "codex")
	for b.Loop() {
		dir := b.TempDir()
		env := []string{"SANDBOX_AGENT_STATE=" + dir + "/state.db", "SANDBOX_AGENT_SERVE_MAX_AGENTS=" + strconv.Itoa(n), "SANDBOX_AGENT_SERVE_MAX_CONCURRENT_TURNS=" + strconv.Itoa(n)}
		s := startChildServe(b, dir, env...)
		ids := make([]string, n)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []string
		fail := func(format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, out, err := s.try(http.MethodPost, "/v1/agents", map[string]any{"driver": driver,
					"fake_model_script": map[string]any{"responses": []map[string]string{{"text": "ONE"}, {"text": "TWO"}}}})
				var a struct{ ID string }
				if err != nil || resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &a) != nil {
					fail("create %d: %v %v %.200s", i, err, resp, out)
					return
				}
				ids[i] = a.ID
				if resp, out, err := s.try(http.MethodPost, "/v1/agents/"+a.ID+"/turns", map[string]any{"prompt": "one"}); err != nil || resp.StatusCode != 200 {
					fail("turn 1 of %d: %v %v %.200s", i, err, resp, out)
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			b.Fatalf("before the kill:\n%s", strings.Join(failures, "\n"))
		}
		s.kill()
		t0 := time.Now()
		s = startChildServe(b, dir, env...)
		for _, id := range ids {
			resp, out, err := s.try(http.MethodGet, "/v1/agents/"+id, nil)
			if err != nil || resp.StatusCode != 200 || !strings.Contains(string(out), `"status":"idle"`) {
				b.Fatalf("agent %s after the restart: %v %v %.300s\n%s", id, err, resp, out, s.stderr.String())
			}
		}
		answer := time.Since(t0)
		done := fmt.Sprintf(`msg="recovered agents" adopted=%d lost=0`, n)
		for !strings.Contains(s.stderr.String(), done) {
			if time.Since(t0) > 5*time.Minute {
				b.Fatalf("no %s in 5 min:\n%s", done, s.stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		readopt := time.Since(t0)
		// The floor, measured now on the same sandboxes: one exec of
		// `true` in each through this serve, as many at once as Recover
		// adopts (an adoption is one exec and an inspect).
		t1 := time.Now()
		sem := make(chan struct{}, 8)
		for _, id := range ids {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if resp, out, err := s.try(http.MethodPost, "/v1/agents/"+id+"/exec", map[string]any{"cmd": []string{"true"}}); err != nil || resp.StatusCode != 200 {
					fail("exec in %s: %v %v %.200s", id, err, resp, out)
				}
			}()
		}
		wg.Wait()
		floor := time.Since(t1)
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, out, err := s.try(http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "two"}); err != nil || resp.StatusCode != 200 {
					fail("turn 2 of %s: %v %v %.200s", id, err, resp, out)
				}
				if resp, out, err := s.try(http.MethodDelete, "/v1/agents/"+id, nil); err != nil || resp.StatusCode != http.StatusNoContent {
					fail("delete %s: %v %v %.200s", id, err, resp, out)
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			b.Fatalf("after the restart:\n%s", strings.Join(failures, "\n"))
		}
		s.kill()
		b.ReportMetric(float64(n), "agents")
		b.ReportMetric(answer.Seconds(), "answer-s")
		b.ReportMetric(readopt.Seconds(), "readopt-s")
		b.ReportMetric(floor.Seconds(), "exec-floor-s")
		b.ReportMetric(readopt.Seconds()/floor.Seconds(), "readopt/floor")
		b.ReportMetric(0, "failures")
	}
}

// BenchmarkServeScale drives SANDBOX_AGENT_SERVE_SCALE_N agents (default
// 50) concurrently through one serve on a SQLite state file: each is created, asks a turn with a
// tool call, asks a follow-up, runs a command and is deleted. Any failure
// fails the benchmark; the metrics are the wall time and the p50 and p95
// of a create and of a turn. SANDBOX_AGENT_SCALE_DRIVER (default codex,
// the lightest idle CLI) picks the driver.
func BenchmarkServeScale(b *testing.B) {
	n, err := strconv.Atoi(envOr("SANDBOX_AGENT_SERVE_SCALE_N", "50"))
	if err != nil || n < 1 {
		b.Fatalf("SANDBOX_AGENT_SERVE_SCALE_N: %v", err)
	}
	driver := envOr("SANDBOX_AGENT_SCALE_DRIVER", "codex")
	for b.Loop() {
		// A persistent server: its state a SQLite file, as by default.
		srv := startServeWith(b, map[string]string{"SANDBOX_AGENT_SERVE_MAX_AGENTS": strconv.Itoa(n), "SANDBOX_AGENT_SERVE_MAX_CONCURRENT_TURNS": strconv.Itoa(n),
			"SANDBOX_AGENT_STATE": filepath.Join(b.TempDir(), "state.db")})
		var mu sync.Mutex
		var creates, turns []time.Duration
		var failures []string
		fail := func(i int, format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf("agent %d: ", i)+fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		start := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				word := fmt.Sprintf("scale-%d", i)
				script := map[string]any{"responses": []map[string]string{
					{"tool": "shell", "command": "echo " + word + " > /tmp/word.txt"},
					{"text": "DONE-" + word},
					{"text": "AGAIN-" + word},
				}}
				t0 := time.Now()
				resp, out, err := srv.try(http.MethodPost, "/v1/agents", map[string]any{"driver": driver, "fake_model_script": script})
				if err != nil || resp.StatusCode != http.StatusCreated {
					fail(i, "create: %v %v %.200s", err, resp, out)
					return
				}
				dc := time.Since(t0)
				var a struct{ ID string }
				_ = json.Unmarshal(out, &a)
				defer func() {
					if resp, out, err := srv.try(http.MethodDelete, "/v1/agents/"+a.ID, nil); err != nil || resp.StatusCode != http.StatusNoContent {
						fail(i, "delete: %v %v %.200s", err, resp, out)
					}
				}()
				var dts []time.Duration
				for _, want := range []string{"DONE-" + word, "AGAIN-" + word} {
					t1 := time.Now()
					resp, out, err := srv.try(http.MethodPost, "/v1/agents/"+a.ID+"/turns", map[string]any{"prompt": "go"})
					var r struct{ Reply string }
					if err != nil || resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil || r.Reply != want {
						fail(i, "turn: %v %v %.300s", err, resp, out)
						return
					}
					dts = append(dts, time.Since(t1))
				}
				resp, out, err = srv.try(http.MethodPost, "/v1/agents/"+a.ID+"/exec", map[string]any{"cmd": []string{"cat", "/tmp/word.txt"}})
				if err != nil || resp.StatusCode != 200 || !strings.Contains(string(out), word+`\n`) {
					fail(i, "exec: %v %v %.200s", err, resp, out)
					return
				}
				mu.Lock()
				creates = append(creates, dc)
				turns = append(turns, dts...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		if len(failures) > 0 {
			b.Fatalf("%d of %d agents failed:\n%s", len(failures), n, strings.Join(failures, "\n"))
		}
		b.ReportMetric(float64(n), "agents")
		b.ReportMetric(0, "failures")
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(ms(p50(creates)), "create-p50-ms")
		b.ReportMetric(ms(pct(creates, 95)), "create-p95-ms")
		b.ReportMetric(ms(p50(turns)), "turn-p50-ms")
		b.ReportMetric(ms(pct(turns, 95)), "turn-p95-ms")
		srv.stop(b)
	}
}

// try is do without failing the test: the scale round counts failures.
func (s *serveProc) try(method, p string, body any) (*http.Response, []byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequest(method, s.base+p, strings.NewReader(string(data)))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp, out, err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// srvGetenv is the environment startServeWith gives serve, for an app of
// the benchmark's own.
func srvGetenv(b *testing.B) func(string) string {
	env := cliEnv()
	env["SANDBOX_AGENT_AUDIT_ROOT"] = filepath.Join(b.TempDir(), "audit")
	return func(k string) string { return env[k] }
}

func p50(ds []time.Duration) time.Duration { return pct(ds, 50) }

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
