package codex

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// TestBridge runs assets/appserver.mjs against a scripted app-server
// (testdata/bridge/fake-app-server.mjs, as "codex" first on PATH): the
// handshake, a request app-server sends the client refused with a
// JSON-RPC error (nothing approved), a turn ended by its own turn/completed
// only, and an abort through turn/interrupt and
// thread/backgroundTerminals/clean. The real app-server's side is in the
// integration tests (TestCodexLongLived, TestCodexAbort).
func TestBridge(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		prereq.Missing(t, "node is not installed: %v", err)
	}
	fake, err := filepath.Abs("testdata/bridge/fake-app-server.mjs")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "codex"), []byte("#!/bin/sh\nexec node "+fake+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "assets/appserver.mjs")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// untilEnd reads the bridge's lines up to its turn_end.
	untilEnd := func(write string) []string {
		t.Helper()
		if _, err := io.WriteString(stdin, write); err != nil {
			t.Fatal(err)
		}
		var got []string
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the bridge exited; lines %q", got)
				}
				got = append(got, l)
				if strings.HasPrefix(l, `{"type":"turn_end"`) {
					return got
				}
			case <-timeout:
				t.Fatalf("no turn_end; lines %q", got)
			}
		}
	}
	has := func(lines []string, sub string) bool {
		for _, l := range lines {
			if strings.Contains(l, sub) {
				return true
			}
		}
		return false
	}

	turn1 := untilEnd(`{"type":"prompt","threadId":"","text":"hi","model":"m1"}` + "\n")
	var answer struct {
		Params struct {
			ID     string `json:"id"`
			Result any    `json:"result"`
			Error  *struct {
				Code int `json:"code"`
			} `json:"error"`
		} `json:"params"`
	}
	for _, l := range turn1 {
		if strings.HasPrefix(l, `{"method":"test/answer"`) {
			_ = json.Unmarshal([]byte(l), &answer)
		}
	}
	if answer.Params.ID != "srv-1" || answer.Params.Error == nil || answer.Params.Error.Code != -32601 || answer.Params.Result != nil {
		t.Errorf("the approval request was answered %+v; lines %q", answer.Params, turn1)
	}
	for _, want := range []string{
		`"method":"initialize"`, `"optOutNotificationMethods":["item/agentMessage/delta"`,
		`"method":"thread/start","params":{"model":"m1","cwd":null,"approvalPolicy":"never","sandbox":"danger-full-access"}`,
		`"method":"thread/started"`, `"text":"ANSWER 1"`,
	} {
		if !has(turn1, want) {
			t.Errorf("turn 1 lacks %s: %q", want, turn1)
		}
	}
	if last := turn1[len(turn1)-1]; last != `{"type":"turn_end","threadId":"01a23e0c-0000-7000-8000-0000000000aa"}` {
		t.Errorf("turn 1 ended with %s", last)
	}
	if !has(turn1, `"status":"completed"}}}`) || has(turn1, `"method":"test/got","params":{"method":"turn/interrupt"`) {
		t.Errorf("turn 1: %q", turn1)
	}

	// The same thread: no second thread/start or resume.
	turn2 := untilEnd(`{"type":"prompt","threadId":"01a23e0c-0000-7000-8000-0000000000aa","text":"hang","model":"m1"}` + "\n" + `{"type":"abort"}` + "\n")
	if has(turn2, `"params":{"method":"thread/start"`) || has(turn2, `"params":{"method":"thread/resume"`) {
		t.Errorf("turn 2 set up the thread again: %q", turn2)
	}
	for _, want := range []string{`"method":"turn/interrupt","params":{"threadId":"01a23e0c-0000-7000-8000-0000000000aa","turnId":"turn-2"}`, `"status":"interrupted"`, `"method":"thread/backgroundTerminals/clean"`} {
		if !has(turn2, want) {
			t.Errorf("turn 2 lacks %s: %q", want, turn2)
		}
	}
	// An abort with no turn is dropped: the next turn runs.
	if _, err := io.WriteString(stdin, `{"type":"abort"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	turn3 := untilEnd(`{"type":"prompt","threadId":"01a23e0c-0000-7000-8000-0000000000aa","text":"again","model":"m1"}` + "\n")
	if !has(turn3, `"text":"ANSWER 3"`) || has(turn3, `turn/interrupt`) {
		t.Errorf("turn 3: %q", turn3)
	}
	// stdin's end ends app-server, and the bridge with its status.
	stdin.Close()
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the bridge: %v", err)
	}
}
