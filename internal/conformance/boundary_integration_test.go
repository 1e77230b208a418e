//go:build integration

package conformance_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/internal/drivers"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
	"github.com/sandbox-agent/sandbox-agent/modelproxy"
)

// spyCommand runs in the agent's own shell tool while its CLI runs: it
// collects what a prompt-injected agent could read — its environment and
// every readable process's environment and command line — into a file.
const spyCommand = `{ env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < "$f"; done; } > /tmp/spy.txt 2>/dev/null; echo spied`

// TestConformanceKeyNeverInSandbox: with default settings every driver's
// turn reaches the fake model through the model proxy, and the key given
// to the driver is nowhere in the container — not in what the agent's
// shell tool can read while the CLI runs, not in any process's environment
// or command line read as root, not in any file of an export of the
// container's filesystem (the CLI's config included) — and nowhere in
// the audit folder. The model proxy's audit has the request.
func TestConformanceKeyNeverInSandbox(t *testing.T) {
	var subs []subtest
	for _, name := range drivers.Names() {
		subs = append(subs, subtest{name, func(t *testing.T) {
			srv := drivertest.FakeModel(t, drivertest.ShellThenDone(spyCommand))
			drv := drivers.All()[name](drivers.Endpoint{BaseURL: srv.URL() + "/v1", APIKey: drivertest.Key, Provider: "sandbox"})
			root := drivertest.AuditRoot(t)
			a := testenv.StartAgent(t, drv, root)
			res, err := a.Stream(drivertest.Ctx(t), "spy", nil)
			if err != nil || res.Reply != "DONE" {
				t.Fatalf("turn through the model proxy: reply %q, err %v", res.Reply, err)
			}
			key := []byte(drivertest.Key)

			// The spy saw the CLI's environment (the token, not the key).
			spy, err := a.Container().ReadFile(drivertest.Ctx(t), "/tmp/spy.txt", 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(spy, []byte("sa-proxy-")) {
				t.Errorf("the spy did not see the CLI's token: the scan read nothing useful (%d bytes)", len(spy))
			}
			if bytes.Contains(spy, key) {
				t.Errorf("the agent's shell tool read the key")
			}

			// Every process, read as root, now.
			ps, err := a.Container().Run(drivertest.Ctx(t), sandboxagent.ExecRequest{User: "0", Cmd: []string{"sh", "-c",
				`for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f"; done 2>/dev/null; echo scanned`}})
			if err != nil || !bytes.Contains(ps.Stdout, []byte("scanned")) {
				t.Fatalf("scan processes: %v %s", err, ps.Stderr)
			}
			if bytes.Contains(ps.Stdout, key) {
				t.Errorf("a process of the sandbox holds the key")
			}
			if !bytes.Contains(ps.Stdout, []byte("sa-forward")) { // the relay's command line: the scan works
				t.Errorf("the root scan did not see the relay's command line")
			}

			// Every file of the container's filesystem.
			n, found := exportHolds(t, a.Container().ID(), key)
			if found != "" {
				t.Errorf("the container's filesystem holds the key in %s", found)
			}
			if n < 1000 {
				t.Errorf("the export held only %d files", n)
			}
			if _, spyFile := exportHolds(t, a.Container().ID(), []byte("sa-proxy-")); spyFile != "tmp/spy.txt" {
				t.Errorf("the export scan found the token in %q, want tmp/spy.txt: the scan works", spyFile)
			}

			// The audit folder, and the proxy's line for each request.
			var lines int
			filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
				if err != nil || info.IsDir() {
					return err
				}
				data, _ := os.ReadFile(p)
				if bytes.Contains(data, key) {
					t.Errorf("audit file %s holds the key", p)
				}
				if filepath.Base(p) == "model.jsonl" {
					sc := bufio.NewScanner(bytes.NewReader(data))
					for sc.Scan() {
						var r modelproxy.Record
						if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
							t.Errorf("model.jsonl: %v: %s", err, sc.Text())
						}
						if r.Status == 200 && r.Method == "POST" && r.BytesOut > 0 {
							lines++
						}
					}
				}
				return nil
			})
			if requests := len(srv.Requests()); lines < 2 || lines > requests {
				t.Errorf("model.jsonl has %d successful requests, the fake model saw %d (want >= 2, <= %d)", lines, requests, requests)
			}
			if a.NetworkAuditDir() == "" || !strings.HasPrefix(a.NetworkAuditDir(), root) {
				t.Errorf("NetworkAuditDir %q not under %s", a.NetworkAuditDir(), root)
			}
		}})
	}
	runConcurrently(t, subs)
}

// exportHolds streams `docker export` of the container (its whole
// filesystem, without /proc and /sys) and returns the number of entries
// and the first entry holding secret ("" if none). The engine's CLI talks
// to whichever engine DOCKER_HOST names (Podman too).
func exportHolds(t *testing.T, id string, secret []byte) (int, string) {
	t.Helper()
	cmd := exec.Command("docker", "export", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("docker export: %v", err)
	}
	defer cmd.Wait()
	tr := newTarScanner(out)
	n, found, err := tr.scan(secret)
	if err != nil {
		t.Fatalf("docker export: %v: %s", err, stderr.String())
	}
	io.Copy(io.Discard, out)
	return n, found
}

// tarScanner searches every regular file of a tar stream for a secret,
// in chunks (files can be large) with an overlap so no match is split.
type tarScanner struct{ tr *tar.Reader }

func newTarScanner(r io.Reader) *tarScanner { return &tarScanner{tr: tar.NewReader(r)} }

func (s *tarScanner) scan(secret []byte) (int, string, error) {
	n := 0
	buf := make([]byte, 1<<20)
	for {
		h, err := s.tr.Next()
		if err == io.EOF {
			return n, "", nil
		}
		if err != nil {
			return n, "", err
		}
		n++
		if bytes.Contains([]byte(h.Name+h.Linkname), secret) {
			return n, h.Name, nil
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		keep := 0
		for {
			m, err := io.ReadFull(s.tr, buf[keep:])
			if bytes.Contains(buf[:keep+m], secret) {
				return n, h.Name, nil
			}
			if err != nil {
				break
			}
			keep = min(len(secret)-1, keep+m)
			copy(buf, buf[len(buf)-keep:])
		}
	}
}
