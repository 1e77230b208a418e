//go:build integration

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/gc"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// apiDriver is the CLI the API suite drives: codex starts in a fraction
// of a second, so every route is covered quickly; the conformance suite
// covers the drivers themselves.
const apiDriver = "codex"

// endlessScan counts drivertest.EndlessCommand processes in a sandbox.
var endlessScan = []string{"sh", "-c", `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$p"; echo; done 2>/dev/null | grep -c '^` + drivertest.EndlessCommand + `' || true`}

// TestServeAPI drives every route of serve over real HTTP, with real
// sandboxes and the fake model: auth, body limits, unknown agents, turns
// (JSON and SSE), a second concurrent turn, a client that disconnects,
// a turn timeout, exec, files both ways with a hostile tree, sessions,
// the agent limit, and the graceful shutdown that removes every sandbox.
func TestServeAPI(t *testing.T) {
	rt := testenv.Runtime(t)
	s := startServeWith(t, map[string]string{
		"SANDBOX_AGENT_SERVE_MAX_AGENTS":     "2",
		"SANDBOX_AGENT_SERVE_MAX_BODY_BYTES": strconv.Itoa(256 << 10),
	})

	t.Run("auth", func(t *testing.T) {
		for _, p := range []string{"GET /v1/health", "GET /v1/agents", "POST /v1/agents", "GET /v1/agents/x/files?path=/etc", "GET /v1/openapi.json", "GET /ui/app.js", "DELETE /v1/agents/x"} {
			method, target, _ := strings.Cut(p, " ")
			for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + s.token, "Bearer " + s.token + "x"} {
				req, _ := http.NewRequest(method, s.base+target, strings.NewReader(`{"driver":"codex"}`))
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := s.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantError(t, fmt.Sprintf("%s with %q", p, auth), resp, out, http.StatusUnauthorized, "unauthorized")
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s: no WWW-Authenticate", p)
				}
			}
		}
		// The inspector: a login form first, then the cookie.
		resp, err := s.client.Get(s.base + "/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !bytes.Contains(page, []byte(`name="token"`)) {
			t.Errorf("GET / without a token: %d, want 401 and the login form:\n%s", resp.StatusCode, page)
		}
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err = noRedirect.PostForm(s.base+"/login", url.Values{"token": {"wrong"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("login with a wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
		resp, err = noRedirect.PostForm(s.base+"/login", url.Values{"token": {s.token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cookies := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
			t.Fatalf("login: %d, cookies %+v", resp.StatusCode, cookies)
		}
		req, _ := http.NewRequest(http.MethodGet, s.base+"/v1/agents", nil)
		req.AddCookie(cookies[0])
		resp, err = s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/agents with the login cookie: %d", resp.StatusCode)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		cases := []struct {
			name   string
			body   any
			status int
			kind   string
		}{
			{"not JSON", strings.NewReader("{driver"), 400, "invalid_argument"},
			{"two values", strings.NewReader(`{"driver":"codex"} {}`), 400, "invalid_argument"},
			{"unknown field", map[string]any{"driver": apiDriver, "drivr": 1}, 400, "invalid_argument"},
			{"no driver", map[string]any{}, 400, "invalid_argument"},
			{"unknown driver", map[string]any{"driver": "nope"}, 400, "invalid_argument"},
			{"bad memory", map[string]any{"driver": apiDriver, "memory": "lots"}, 400, "invalid_argument"},
			{"bad egress", map[string]any{"driver": apiDriver, "egress": "some"}, 400, "invalid_argument"},
			{"bad fake script", map[string]any{"driver": apiDriver, "fake_model_script": []int{1}}, 400, "invalid_argument"},
			{"negative keepalive", map[string]any{"driver": apiDriver, "keepalive": -1}, 400, "invalid_argument"},
			{"over the body limit", map[string]any{"driver": apiDriver, "model": strings.Repeat("x", 300<<10)}, 413, "too_large"},
		}
		for _, c := range cases {
			resp, out := s.do(t, http.MethodPost, "/v1/agents", c.body)
			wantError(t, c.name, resp, out, c.status, c.kind)
		}
		for _, p := range []string{"GET /v1/agents/ag_nope", "DELETE /v1/agents/ag_nope", "POST /v1/agents/ag_nope/turns", "GET /v1/agents/ag_nope/turns",
			"GET /v1/agents/ag_nope/events", "POST /v1/agents/ag_nope/exec", "GET /v1/agents/ag_nope/files?path=/tmp", "PUT /v1/agents/ag_nope/files?path=/tmp/x",
			"GET /v1/agents/ag_nope/sessions", "POST /v1/agents/ag_nope/sessions/current/fork", "PUT /v1/agents/ag_nope/session"} {
			method, target, _ := strings.Cut(p, " ")
			resp, out := s.do(t, method, target, strings.NewReader(`{"prompt":"x","cmd":["true"]}`))
			wantError(t, p, resp, out, http.StatusNotFound, "not_found")
		}
	})

	script := map[string]any{"responses": []map[string]any{
		{"tool": "shell", "command": "sleep 3; mkdir -p /tmp/api && echo one > /tmp/api/one.txt"},
		{"text": "DONE-1"},
		{"tool": "shell", "command": drivertest.EndlessCommand}, // the turn the client leaves
		{"text": "AFTER-DISCONNECT"},
		{"tool": "shell", "command": drivertest.EndlessCommand}, // the turn that times out
		{"text": "AFTER-TIMEOUT"},
	}}
	id := s.create(t, map[string]any{"driver": apiDriver, "fake_model_script": script, "env": map[string]string{"API_TEST": "yes"}})
	agentPath := "/v1/agents/" + id

	var firstSession string
	t.Run("turn streamed, watched, and a second one refused", func(t *testing.T) {
		// A watcher of the agent, from before the turn.
		wctx, wcancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer wcancel()
		wreq, _ := http.NewRequestWithContext(wctx, http.MethodGet, s.base+agentPath+"/events", nil)
		wreq.Header.Set("Authorization", "Bearer "+s.token)
		wresp, err := s.client.Do(wreq)
		if err != nil || wresp.StatusCode != http.StatusOK || !strings.HasPrefix(wresp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("GET events: %v %v", wresp, err)
		}
		watched := make(chan []string, 1)
		go func() {
			var seen []string
			_ = readSSE(wresp.Body, func(m sseMessage) bool {
				seen = append(seen, m.event)
				if m.event == "event" {
					var e sandboxagent.Event
					_ = json.Unmarshal(m.data, &e)
					seen[len(seen)-1] += ":" + string(e.Kind)
				}
				return m.event != "turn_end"
			})
			wresp.Body.Close()
			watched <- seen
		}()

		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+agentPath+"/turns", strings.NewReader(`{"prompt":"make /tmp/api/one.txt"}`))
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := s.client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST turns (SSE): %v %v", resp, err)
		}
		defer resp.Body.Close()
		var kinds []string
		var res map[string]any
		checkedBusy := false
		err = readSSE(resp.Body, func(m sseMessage) bool {
			switch m.event {
			case "event":
				var e sandboxagent.Event
				if err := json.Unmarshal(m.data, &e); err != nil {
					t.Errorf("event %s: %v", m.data, err)
				}
				kinds = append(kinds, string(e.Kind))
				if e.Kind == sandboxagent.KindToolCall && !checkedBusy {
					checkedBusy = true
					// The tool sleeps 3 s: the turn is running.
					r2, out := s.do(t, http.MethodPost, agentPath+"/turns", map[string]any{"prompt": "again"})
					wantError(t, "a second turn while one runs", r2, out, http.StatusConflict, "busy")
					r3, out := s.do(t, http.MethodPost, agentPath+"/sessions/current/fork", nil)
					wantError(t, "a fork while a turn runs", r3, out, http.StatusConflict, "busy")
					var v struct{ Status string }
					if r4, out := s.do(t, http.MethodGet, agentPath, nil); r4.StatusCode != 200 || json.Unmarshal(out, &v) != nil || v.Status != "busy" {
						t.Errorf("GET agent during a turn: %d %s, want status busy", r4.StatusCode, out)
					}
				}
			case "result":
				if err := json.Unmarshal(m.data, &res); err != nil {
					t.Errorf("result %s: %v", m.data, err)
				}
				return false
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if res == nil || res["reply"] != "DONE-1" || res["error"] != nil {
			t.Fatalf("result %v (events %v)", res, kinds)
		}
		firstSession, _ = res["session_id"].(string)
		if !checkedBusy || !strings.Contains(strings.Join(kinds, " "), "tool_call tool_result") || kinds[len(kinds)-1] != "done" {
			t.Errorf("events %v", kinds)
		}
		select {
		case seen := <-watched:
			got := strings.Join(seen, " ")
			if !strings.HasPrefix(got, "turn_start ") || !strings.Contains(got, "event:tool_call") || !strings.HasSuffix(got, "event:done turn_end") {
				t.Errorf("watch stream: %s", got)
			}
		case <-time.After(time.Minute):
			t.Error("the watch stream did not see turn_end")
		}
		// The turn is kept: its events and its audit trail.
		resp2, out := s.do(t, http.MethodGet, agentPath+"/turns/1", nil)
		var turn struct {
			Reply      string
			EventCount int `json:"event_count"`
			Events     []sandboxagent.Event
			AuditDir   string `json:"audit_dir"`
		}
		if resp2.StatusCode != 200 || json.Unmarshal(out, &turn) != nil || turn.Reply != "DONE-1" || len(turn.Events) != len(kinds) || turn.EventCount != len(kinds) || turn.AuditDir == "" {
			t.Errorf("GET turns/1: %d %.300s", resp2.StatusCode, out)
		}
		resp2, out = s.do(t, http.MethodGet, agentPath+"/sessions/"+firstSession+"/events", nil)
		var audit struct{ Events []sandboxagent.Event }
		if resp2.StatusCode != 200 || json.Unmarshal(out, &audit) != nil || len(audit.Events) != len(kinds) {
			t.Errorf("session events from the audit trail: %d %.300s (want %d events)", resp2.StatusCode, out, len(kinds))
		}
		resp2, out = s.do(t, http.MethodGet, agentPath+"/turns/9", nil)
		wantError(t, "an unknown turn", resp2, out, 404, "not_found")
	})

	t.Run("client disconnect aborts the turn, the session is kept", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+agentPath+"/turns", strings.NewReader(`{"prompt":"run the endless command"}`))
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = readSSE(resp.Body, func(m sseMessage) bool {
			var e sandboxagent.Event
			_ = json.Unmarshal(m.data, &e)
			return !(m.event == "event" && e.Kind == sandboxagent.KindToolCall)
		})
		// The tool runs; the client goes away.
		waitFor(t, 2*time.Minute, "the endless command to run", func() bool { return s.exec(t, id, endlessScan).Stdout == "1\n" })
		cancel()
		resp.Body.Close()
		waitFor(t, time.Minute, "the turn to end", func() bool {
			_, out := s.do(t, http.MethodGet, agentPath+"/turns/2", nil)
			var r struct{ Running bool }
			return json.Unmarshal(out, &r) == nil && !r.Running
		})
		_, out := s.do(t, http.MethodGet, agentPath+"/turns/2", nil)
		var r struct{ Kind, Error string }
		if json.Unmarshal(out, &r) != nil || r.Kind != "interrupted" {
			t.Errorf("the abandoned turn: %.300s, want kind interrupted", out)
		}
		if got := s.exec(t, id, endlessScan).Stdout; got != "0\n" {
			t.Errorf("the abandoned turn's tool still runs (%q)", got)
		}
		resp2, out := s.do(t, http.MethodPost, agentPath+"/turns", map[string]any{"prompt": "go on"})
		var next struct {
			Reply     string
			SessionID string `json:"session_id"`
		}
		if resp2.StatusCode != 200 || json.Unmarshal(out, &next) != nil || next.Reply != "AFTER-DISCONNECT" || next.SessionID != firstSession {
			t.Errorf("the turn after: %d %.300s, want AFTER-DISCONNECT in session %s", resp2.StatusCode, out, firstSession)
		}
	})

	t.Run("turn timeout", func(t *testing.T) {
		resp, out := s.do(t, http.MethodPost, agentPath+"/turns", map[string]any{"prompt": "endless again", "timeout": 8})
		wantError(t, "a turn past its timeout", resp, out, http.StatusGatewayTimeout, "timeout")
		var body struct {
			Turn struct{ Events []sandboxagent.Event }
		}
		if json.Unmarshal(out, &body) != nil || len(body.Turn.Events) == 0 {
			t.Errorf("the timed-out turn's events are missing: %.300s", out)
		}
		if got := s.exec(t, id, endlessScan).Stdout; got != "0\n" {
			t.Errorf("the timed-out turn's tool still runs (%q)", got)
		}
		resp, out = s.do(t, http.MethodPost, agentPath+"/turns", map[string]any{"prompt": ""})
		wantError(t, "an empty prompt", resp, out, 400, "invalid_argument")
	})

	t.Run("exec", func(t *testing.T) {
		res := s.exec(t, id, []string{"sh", "-c", "cat /tmp/api/one.txt; echo err >&2; echo $API_TEST $X; exit 3"}, "X=x")
		if res.ExitCode != 3 || res.Stdout != "one\nyes x\n" || res.Stderr != "err\n" || res.TimedOut {
			t.Errorf("exec: %+v", res)
		}
		resp, out := s.do(t, http.MethodPost, agentPath+"/exec", map[string]any{"cmd": []string{"sleep", "100"}, "timeout": 1})
		var r execResult
		if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil || !r.TimedOut || r.ExitCode != 124 {
			t.Errorf("exec past its timeout: %d %s", resp.StatusCode, out)
		}
		for _, body := range []any{map[string]any{"cmd": []string{}}, map[string]any{"cmd": []string{"ls"}, "workdir": "rel"}} {
			resp, out := s.do(t, http.MethodPost, agentPath+"/exec", body)
			wantError(t, fmt.Sprint("exec ", body), resp, out, 400, "invalid_argument")
		}
	})

	t.Run("files", func(t *testing.T) {
		// Upload: a tar with a file, a directory and a symlink (left out).
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: "d/in.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
		_, _ = tw.Write([]byte("in\n"))
		_ = tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"})
		_ = tw.Close()
		resp, out := s.do(t, http.MethodPut, agentPath+"/files?path=/tmp/up", &buf, "Content-Type: application/x-tar")
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Sandbox-Agent-Skipped") != "1" {
			t.Errorf("PUT tar: %d %s, skipped %q", resp.StatusCode, out, resp.Header.Get("X-Sandbox-Agent-Skipped"))
		}
		var empty bytes.Buffer
		_ = tar.NewWriter(&empty).Close()
		resp, out = s.do(t, http.MethodPut, agentPath+"/files?path=/tmp/emptydir", &empty, "Content-Type: application/x-tar")
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("PUT an empty tar: %d %s", resp.StatusCode, out)
		}
		if res := s.exec(t, id, []string{"sh", "-c", "test -d /tmp/emptydir && ls -A /tmp/emptydir | wc -l"}); res.Stdout != "0\n" {
			t.Errorf("an empty tar should make an empty directory: %+v", res)
		}
		resp, out = s.do(t, http.MethodPut, agentPath+"/files?path=/tmp/up/single.bin", strings.NewReader("single"), "Content-Type: application/octet-stream")
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("PUT file: %d %s", resp.StatusCode, out)
		}
		if res := s.exec(t, id, []string{"sh", "-c", "cat /tmp/up/d/in.txt /tmp/up/single.bin; test -e /tmp/up/link || echo nolink; stat -c %U /tmp/up/d/in.txt"}); res.Stdout != "in\nsinglenolink\nagent\n" {
			t.Errorf("uploaded files: %+v", res)
		}
		for _, c := range []struct{ name, path, ctype string }{
			{"relative path", "tmp/x", "application/octet-stream"},
			{"the root", "/", "application/x-tar"},
			{"no content type", "/tmp/x", ""},
		} {
			resp, out := s.do(t, http.MethodPut, agentPath+"/files?path="+url.QueryEscape(c.path), strings.NewReader("x"), "Content-Type: "+c.ctype)
			if resp.StatusCode/100 != 4 {
				t.Errorf("PUT %s: %d %s", c.name, resp.StatusCode, out)
			}
		}
		resp, out = s.do(t, http.MethodPut, agentPath+"/files?path=/tmp/big", bytes.NewReader(make([]byte, 300<<10)), "Content-Type: application/octet-stream")
		wantError(t, "an upload over the body limit", resp, out, http.StatusRequestEntityTooLarge, "too_large")

		// Download of a hostile tree: links planted in the sandbox never
		// reach the client as links or outside paths.
		plant := "set -e; mkdir -p /tmp/h/sub; echo ok > /tmp/h/ok.txt; echo deep > /tmp/h/sub/deep.txt; " +
			"ln -s /etc/passwd /tmp/h/passwd; ln -s / /tmp/h/root; ln -s ../../../../etc /tmp/h/sub/up; ln /tmp/h/ok.txt /tmp/h/hard; mkfifo /tmp/h/fifo"
		if res := s.exec(t, id, []string{"sh", "-c", plant}); res.ExitCode != 0 {
			t.Fatalf("plant: %+v", res)
		}
		resp, out = s.do(t, http.MethodGet, agentPath+"/files?path=/tmp/h", nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-tar" {
			t.Fatalf("GET files: %d %.300s", resp.StatusCode, out)
		}
		got := map[string]string{}
		tr := tar.NewReader(bytes.NewReader(out))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("the tar: %v", err)
			}
			if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
				t.Errorf("entry %s has type %q: only files and directories may reach the client", hdr.Name, hdr.Typeflag)
			}
			if clean := path.Clean(hdr.Name); clean != "h" && !strings.HasPrefix(clean, "h/") || strings.Contains(hdr.Name, "..") || hdr.Linkname != "" {
				t.Errorf("entry %q (link %q) is outside h/", hdr.Name, hdr.Linkname)
			}
			data, _ := io.ReadAll(tr)
			got[strings.TrimSuffix(hdr.Name, "/")] = string(data)
		}
		want := map[string]string{"h": "", "h/sub": "", "h/ok.txt": "ok\n", "h/sub/deep.txt": "deep\n", "h/hard": "ok\n"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("tar entries %v, want %v", got, want)
		}
		if n, _ := strconv.Atoi(resp.Header.Get("X-Sandbox-Agent-Skipped")); n < 4 {
			t.Errorf("X-Sandbox-Agent-Skipped %q, want the 3 symlinks and the fifo", resp.Header.Get("X-Sandbox-Agent-Skipped"))
		}
		resp, out = s.do(t, http.MethodGet, agentPath+"/files?path=/tmp/h/passwd", nil)
		wantError(t, "GET of a planted symlink", resp, out, http.StatusUnprocessableEntity, "unsafe_archive")
		if bytes.Contains(out, []byte("root:x:0")) {
			t.Errorf("the symlink's target leaked: %s", out)
		}
		resp, out = s.do(t, http.MethodGet, agentPath+"/files?path=/tmp/none", nil)
		wantError(t, "GET of a missing path", resp, out, http.StatusNotFound, "not_found")
	})

	t.Run("sessions", func(t *testing.T) {
		resp, out := s.do(t, http.MethodGet, agentPath+"/sessions", nil)
		var list struct {
			Current  string
			Sessions []sandboxagent.SessionInfo
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &list) != nil || list.Current != firstSession || len(list.Sessions) != 1 {
			t.Fatalf("sessions: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodPost, agentPath+"/sessions/current/fork", nil)
		var fork struct {
			SessionID string `json:"session_id"`
		}
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &fork) != nil || fork.SessionID == "" || fork.SessionID == firstSession {
			t.Fatalf("fork: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodGet, agentPath+"/sessions/"+fork.SessionID, nil)
		var dump sandboxagent.SessionDump
		if resp.StatusCode != 200 || json.Unmarshal(out, &dump) != nil || dump.SessionID != fork.SessionID || len(dump.Files) == 0 {
			t.Fatalf("dump: %d %.300s", resp.StatusCode, out)
		}
		// Load the fork into a second agent, which then continues it.
		other := s.create(t, map[string]any{"driver": apiDriver, "fake_model_script": map[string]any{"responses": []map[string]string{{"text": "IN-THE-LOADED-SESSION"}}}})
		resp, out = s.do(t, http.MethodPost, "/v1/agents/"+other+"/sessions", dump)
		var loaded struct {
			SessionID string `json:"session_id"`
		}
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &loaded) != nil || loaded.SessionID != fork.SessionID {
			t.Fatalf("load: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodPost, "/v1/agents/"+other+"/turns", map[string]any{"prompt": "continue"})
		var tr struct {
			Reply     string
			SessionID string `json:"session_id"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &tr) != nil || tr.Reply != "IN-THE-LOADED-SESSION" || tr.SessionID != fork.SessionID {
			t.Errorf("turn in the loaded session: %d %.300s", resp.StatusCode, out)
		}
		// The agent limit (2) is reached.
		resp, out = s.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": apiDriver})
		wantError(t, "a third agent", resp, out, http.StatusTooManyRequests, "limit")

		resp, out = s.do(t, http.MethodPut, agentPath+"/session", map[string]any{"session_id": fork.SessionID})
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("set session: %d %s", resp.StatusCode, out)
		}
		if resp, out := s.do(t, http.MethodGet, agentPath, nil); !bytes.Contains(out, []byte(`"session_id":"`+fork.SessionID+`"`)) {
			t.Errorf("the agent after PUT session: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodDelete, agentPath+"/sessions/"+fork.SessionID, nil)
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("delete session: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodGet, agentPath+"/sessions/"+fork.SessionID, nil)
		if resp.StatusCode/100 != 4 {
			t.Errorf("dump of a deleted session: %d %.300s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodPost, agentPath+"/sessions", map[string]any{"driver": apiDriver})
		wantError(t, "load of an empty dump", resp, out, 400, "invalid_argument")
	})

	t.Run("health, listing, openapi", func(t *testing.T) {
		resp, out := s.do(t, http.MethodGet, "/v1/health", nil)
		if resp.StatusCode != 200 || !bytes.Contains(out, []byte(`"agents":2`)) {
			t.Errorf("health: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodGet, "/v1/agents", nil)
		var list struct {
			Agents []struct{ ID, Status, Image, Container string }
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &list) != nil || len(list.Agents) != 2 || list.Agents[0].ID != id || list.Agents[0].Image == "" {
			t.Errorf("agents: %d %s", resp.StatusCode, out)
		}
		resp, out = s.do(t, http.MethodGet, "/v1/openapi.json", nil)
		var doc struct{ OpenAPI string }
		if resp.StatusCode != 200 || json.Unmarshal(out, &doc) != nil || !strings.HasPrefix(doc.OpenAPI, "3.1") {
			t.Errorf("openapi: %d %.100s", resp.StatusCode, out)
		}
	})

	t.Run("delete destroys the sandbox", func(t *testing.T) {
		_, out := s.do(t, http.MethodGet, agentPath, nil)
		var a struct{ Container string }
		_ = json.Unmarshal(out, &a)
		resp, out := s.do(t, http.MethodDelete, agentPath, nil)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", resp.StatusCode, out)
		}
		if _, err := rt.Inspect(context.Background(), a.Container); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
			t.Errorf("container %s after DELETE: %v", a.Container, err)
		}
		resp, out = s.do(t, http.MethodDelete, agentPath, nil)
		wantError(t, "a second DELETE", resp, out, 404, "not_found")
	})

	// The graceful shutdown removes the agent still standing.
	var left []string
	_, out := s.do(t, http.MethodGet, "/v1/agents", nil)
	var list struct {
		Agents []struct{ ID, Container string }
	}
	_ = json.Unmarshal(out, &list)
	for _, a := range list.Agents {
		left = append(left, a.Container)
	}
	if code := s.stop(t); code != exitOK {
		t.Errorf("serve exited %d after SIGTERM-like cancel", code)
	}
	for _, c := range left {
		if _, err := rt.Inspect(context.Background(), c); !errors.Is(err, sandboxagent.ErrContainerNotFound) {
			t.Errorf("container %s after the shutdown: %v", c, err)
		}
	}
}

// TestServeKilled: a serve killed with SIGKILL cannot clean up; its
// sandboxes remove themselves after their keepalive (and gc finds
// nothing of it afterwards).
func TestServeKilled(t *testing.T) {
	rt := testenv.Runtime(t)
	dir := t.TempDir()
	ready, tokenFile := dir+"/ready", dir+"/token"
	// The child is this test binary, running serve (see TestMain).
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SANDBOX_AGENT_TEST_SERVE_CHILD="+dir, "SANDBOX_AGENT_AUDIT_ROOT="+dir+"/audit", "SANDBOX_AGENT_STATE="+dir+"/state.db")
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFor(t, time.Minute, "the child serve's address", func() bool {
		b, err := os.ReadFile(ready)
		return err == nil && strings.Contains(string(b), ":")
	})
	addr, _ := os.ReadFile(ready)
	tok, _ := os.ReadFile(tokenFile)
	s := &serveProc{base: "http://" + strings.TrimSpace(string(addr)), token: strings.TrimSpace(string(tok)), stderr: &stderr, client: &http.Client{Timeout: 3 * time.Minute}}
	const keepalive = 5
	resp, out := s.do(t, http.MethodPost, "/v1/agents", map[string]any{"driver": apiDriver, "keepalive": keepalive,
		"fake_model_script": map[string]any{"responses": []map[string]string{{"text": "HI"}}}})
	var a struct{ ID, Container string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &a) != nil {
		t.Fatalf("create: %d %s\n%s", resp.StatusCode, out, stderr.String())
	}
	if resp, out := s.do(t, http.MethodPost, "/v1/agents/"+a.ID+"/turns", map[string]any{"prompt": "hi"}); resp.StatusCode != 200 {
		t.Fatalf("turn: %d %s", resp.StatusCode, out)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	waitFor(t, 2*time.Minute, "the sandbox to remove itself after its keepalive", func() bool {
		_, err := rt.Inspect(context.Background(), a.Container)
		return errors.Is(err, sandboxagent.ErrContainerNotFound)
	})
	t.Logf("sandbox %s gone %v after SIGKILL (keepalive %d s)", a.Container, time.Since(killed).Round(time.Second), keepalive)
	res, err := gc.Run(context.Background(), rt, gc.Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Removed {
		if e.Name == a.Container {
			t.Errorf("gc still finds %s", a.Container)
		}
	}
}

// TestMain runs serve instead of the tests when TestServeKilled starts
// this binary as its child (SANDBOX_AGENT_TEST_SERVE_CHILD names the
// folder of its ready and token files).
func TestMain(m *testing.M) {
	dir := os.Getenv("SANDBOX_AGENT_TEST_SERVE_CHILD")
	if dir == "" {
		os.Exit(m.Run())
	}
	env := cliEnv()
	// The child's settings come from the test: the state, the gateway,
	// the audit root.
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "SANDBOX_AGENT_") || strings.HasPrefix(k, "GATEWAY_")) && k != "SANDBOX_AGENT_CONFIG" {
			env[k] = v
		}
	}
	os.Exit(run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--ready-file", dir + "/ready", "--token-file", dir + "/token"}, os.Stdout, os.Stderr, func(k string) string {
		if k == "SANDBOX_AGENT_CONFIG" {
			return "/nonexistent/sandbox-agent-test-config.json"
		}
		return env[k]
	}))
}
