//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// serve's /metrics through Debian's real Prometheus: after one agent turn
// whose fake model served known usage, Prometheus scrapes serve with a
// metrics-scope token (its bearer_token_file) and its query API returns
// the token counter equal to what the fake model served; promtool accepts
// the exposition.
func TestServeMetricsPrometheus(t *testing.T) {
	testenv.Engine(t)
	promBin, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	if err1 != nil || err2 != nil {
		prereq.Missing(t, "prometheus and promtool (Debian's prometheus package; .ci/setup installs it): %v %v", err1, err2)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state.db")
	code, stdout, stderr := runCLI(t, map[string]string{}, "serve", "token", "create", "--tenant", "monitoring", "--scope", "metrics", "--state", state)
	if code != exitOK {
		t.Fatalf("metrics token: exit %d: %s", code, stderr)
	}
	metricsToken := strings.TrimSpace(stdout)
	r := startServeWith(t, map[string]string{"SANDBOX_AGENT_STATE": state})

	const in, out = 1234, 56
	id := r.create(t, map[string]any{"driver": "pi", "fake_model_script": map[string]any{"responses": []map[string]any{
		{"text": "COUNTED", "usage": map[string]int{"input_tokens": in, "output_tokens": out}},
	}}})
	// A durable state keeps its agents' sandboxes when serve stops.
	t.Cleanup(func() { r.do(t, http.MethodDelete, "/v1/agents/"+id, nil) })
	resp, body := r.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "count me"})
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("COUNTED")) {
		t.Fatalf("turn: %d %s", resp.StatusCode, body)
	}
	// What the proxy counted for the turn is what the fake model served
	// (pi may ask more than once: the turn's usage is the sum).
	var turn struct {
		Usage struct {
			Usage struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			}
			Requests int64
		}
	}
	if err := json.Unmarshal(body, &turn); err != nil || turn.Usage.Requests == 0 {
		t.Fatalf("turn usage: %v %s", err, body)
	}
	want := turn.Usage.Usage.InputTokens + turn.Usage.Usage.OutputTokens
	if want != (in+out)*turn.Usage.Requests {
		t.Fatalf("the turn counted %d tokens over %d requests, the fake model served %d each", want, turn.Usage.Requests, in+out)
	}

	// The exposition, as a metrics token gets it, passes promtool.
	req, _ := http.NewRequest(http.MethodGet, r.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if mresp.StatusCode != http.StatusOK || !bytes.Contains(exposition, []byte("sandbox_agent_model_tokens_total")) {
		t.Fatalf("GET /metrics: %d\n%s", mresp.StatusCode, exposition)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(exposition)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	// Prometheus scrapes serve every second with the token from a file.
	u, _ := url.Parse(r.base)
	tokenFile := filepath.Join(dir, "metrics-token")
	if err := os.WriteFile(tokenFile, []byte(metricsToken), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: sandbox-agent
    authorization:
      credentials_file: %s
    static_configs:
      - targets: ["%s"]
`, tokenFile, u.Host)), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeLoopbackAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var promLog lockedBuffer
	prom := exec.CommandContext(ctx, promBin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = prom.Wait() }()
	query := "http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(`sum(sandbox_agent_model_tokens_total{job="sandbox-agent",kind=~"input|output"})`)
	var got float64
	var last string
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, last = promValue(query)
		if got == float64(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus' sum of the token counter: %v (last answer %s), want %d\nprometheus log:\n%s", got, last, want, promLog.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("Prometheus scraped serve: %v tokens, as the fake model served", got)
	// The scrape itself was authorized: the target is up.
	if up, last := promValue("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(`up{job="sandbox-agent"}`)); up != 1 {
		t.Errorf("up{job=\"sandbox-agent\"} = %v (%s)", up, last)
	}
}

// promValue is the single value of an instant query's answer (-1 when
// there is none) and the answer itself.
func promValue(query string) (float64, string) {
	resp, err := http.Get(query)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var ans struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal(b, &ans) != nil || len(ans.Data.Result) != 1 || len(ans.Data.Result[0].Value) != 2 {
		return -1, string(b)
	}
	s, _ := ans.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1, string(b)
	}
	return v, string(b)
}

// freeLoopbackAddr is a loopback address with a port free right now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
