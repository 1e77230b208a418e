//go:build integration

package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/telemetry/tracing"
)

// otlpReceiver is an OTLP/HTTP trace receiver in the test: it keeps
// every span it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(io.LimitReader(body, 32<<20))
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// serve with OTEL_EXPORTER_OTLP_ENDPOINT set exports a turn's spans: the
// request's span continues the caller's trace (its traceparent), the
// turn's span is its child and the turn's model requests the turn's; the
// agent's start has its phases and the driver's setup commands under it.
func TestServeTraces(t *testing.T) {
	testenv.Engine(t)
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	r := startServeWith(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL})
	id := r.create(t, map[string]any{"driver": "pi", "fake_model_script": map[string]any{"responses": []map[string]any{
		{"tool": "shell", "command": "echo traced"}, {"text": "TRACED"},
	}}})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	resp, body := r.do(t, http.MethodPost, "/v1/agents/"+id+"/turns", map[string]any{"prompt": "trace me"},
		"Traceparent: 00-"+traceID+"-"+parentID+"-01")
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("TRACED")) {
		t.Fatalf("turn: %d %s", resp.StatusCode, body)
	}
	// A download's span, under its request's.
	if resp, body := r.do(t, http.MethodGet, "/v1/agents/"+id+"/files?path=/etc/hostname", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %s", resp.StatusCode, body)
	}
	if code := r.stop(t); code != 0 { // flushes the spans
		t.Fatalf("serve exited %d:\n%s", code, r.stderr.String())
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	var names []string
	for _, s := range recv.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		names = append(names, s.Name)
	}
	find := func(name string, parent *tracepb.Span) []*tracepb.Span {
		var out []*tracepb.Span
		for _, s := range recv.spans {
			if s.Name == name && (parent == nil || bytes.Equal(s.ParentSpanId, parent.SpanId)) {
				out = append(out, s)
			}
		}
		return out
	}
	servers := find("POST /v1/agents/{id}/turns", nil)
	if len(servers) != 1 {
		t.Fatalf("%d spans of the turn request; spans: %q", len(servers), names)
	}
	srv := servers[0]
	if hex.EncodeToString(srv.TraceId) != traceID || hex.EncodeToString(srv.ParentSpanId) != parentID {
		t.Errorf("the request's span: trace %x parent %x, want the caller's %s / %s", srv.TraceId, srv.ParentSpanId, traceID, parentID)
	}
	turns := find(tracing.SpanTurn, srv)
	if len(turns) != 1 {
		t.Fatalf("%d turn spans under the request's; spans: %q", len(turns), names)
	}
	turn := turns[0]
	models := find(tracing.SpanModelRequest, turn)
	if len(models) < 2 { // the tool call, then the answer
		t.Errorf("%d model request spans under the turn, want at least 2; spans: %q", len(models), names)
	}
	for _, s := range append(models, turn) {
		if hex.EncodeToString(s.TraceId) != traceID {
			t.Errorf("span %s in trace %x, want the caller's", s.Name, s.TraceId)
		}
	}
	attrs := map[string]string{}
	for _, kv := range turn.Attributes {
		attrs[kv.Key] = strings.Trim(kv.Value.String(), " ")
	}
	if !strings.Contains(attrs["sandbox_agent.driver"], "pi") || !strings.Contains(attrs["sandbox_agent.outcome"], "ok") {
		t.Errorf("turn span attributes %v", attrs)
	}
	files := find("GET /v1/agents/{id}/files", nil)
	if len(files) != 1 || len(find(tracing.SpanDownload, files[0])) != 1 {
		t.Errorf("the download: %d request spans (with a download span under it); spans: %q", len(files), names)
	}
	// The agent's start, its phases, and the driver's setup commands
	// under it (the engine's API calls under those, from the engine
	// client's own instrumentation).
	starts := find(tracing.SpanStart, nil)
	if len(starts) != 1 || len(find(tracing.SpanStart+".setup", starts[0])) != 1 {
		t.Fatalf("the agent's start: %d spans (with its setup phase under it); spans: %q", len(starts), names)
	}
	if execs := find(tracing.SpanExec, starts[0]); len(execs) == 0 {
		t.Errorf("no exec span under the agent's start (the driver's setup); spans: %q", names)
	}
}
