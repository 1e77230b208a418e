package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// fakeEngine answers Engine API requests in memory: routes are
// "METHOD /path" with the /vX.Y version prefix removed. Podman mode adds
// the Libpod-Api-Version header to every response, as Podman does.
type fakeEngine struct {
	t      *testing.T
	podman string // libpod API version; "" = Docker
	routes map[string]func(*http.Request) *http.Response

	mu   sync.Mutex
	seen []string
}

var versionPrefix = regexp.MustCompile(`^/v[0-9][0-9A-Za-z.-]*`)

func (f *fakeEngine) RoundTrip(req *http.Request) (*http.Response, error) {
	p := versionPrefix.ReplaceAllString(req.URL.Path, "")
	key := req.Method + " " + p
	f.mu.Lock()
	f.seen = append(f.seen, key)
	f.mu.Unlock()
	var resp *http.Response
	switch h, ok := f.routes[key]; {
	case ok:
		resp = h(req)
	case p == "/_ping":
		resp = reply(http.StatusOK, "OK")
	default:
		resp = reply(http.StatusNotFound, `{"message":"fake engine: no route `+key+`"}`)
	}
	resp.Request = req
	if resp.Header.Get("Api-Version") == "" {
		resp.Header.Set("Api-Version", "1.41")
	}
	if f.podman != "" {
		resp.Header.Set(libpodHeader, f.podman)
	}
	return resp, nil
}

func (f *fakeEngine) called(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.seen, key)
}

func reply(code int, body string) *http.Response {
	h := http.Header{}
	if strings.HasPrefix(body, "{") || strings.HasPrefix(body, "[") {
		h.Set("Content-Type", "application/json")
	}
	return &http.Response{
		StatusCode: code, Status: http.StatusText(code), Header: h,
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)),
		ProtoMajor: 1, ProtoMinor: 1,
	}
}

func jsonReply(t *testing.T, v any) func(*http.Request) *http.Response {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return func(*http.Request) *http.Response { return reply(http.StatusOK, string(b)) }
}

func errReply(code int, msg string) func(*http.Request) *http.Response {
	b, _ := json.Marshal(map[string]any{"message": msg, "cause": msg, "response": code})
	return func(*http.Request) *http.Response { return reply(code, string(b)) }
}

func newFake(t *testing.T, podman string, routes map[string]func(*http.Request) *http.Response) (*Runtime, *fakeEngine) {
	t.Helper()
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("DOCKER_API_VERSION", "")
	f := &fakeEngine{t: t, podman: podman, routes: routes}
	rt, err := New(context.Background(), Options{HTTPClient: &http.Client{Transport: f}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, f
}

func TestInfoDetectsEngine(t *testing.T) {
	dockerVersion := map[string]any{"Version": "20.10.24", "ApiVersion": "1.41", "Platform": map[string]any{"Name": ""}}
	tests := []struct {
		name        string
		podman      string
		version     map[string]any
		secOpts     []string
		want        sandboxagent.EngineInfo
		wantVersion bool // /version is asked
	}{
		{"docker", "", dockerVersion, []string{"name=seccomp,profile=default"},
			sandboxagent.EngineInfo{Name: "docker", Version: "20.10.24", APIVersion: "1.41"}, true},
		{"rootless docker", "", dockerVersion, []string{"name=seccomp,profile=default", "name=rootless"},
			sandboxagent.EngineInfo{Name: "docker", Version: "20.10.24", APIVersion: "1.41", Rootless: true}, true},
		{"podman by header", "4.3.1", nil, []string{"name=seccomp,profile=default"},
			sandboxagent.EngineInfo{Name: "podman", Version: "4.3.1", APIVersion: "1.41"}, false},
		{"rootless podman", "5.2.0", nil, []string{"name=rootless", "name=seccomp,profile=default"},
			sandboxagent.EngineInfo{Name: "podman", Version: "5.2.0", APIVersion: "1.41", Rootless: true}, false},
		{"podman by version component", "", map[string]any{"Version": "3.4.4", "ApiVersion": "1.40",
			"Components": []map[string]any{{"Name": "Podman Engine", "Version": "3.4.4"}}}, nil,
			sandboxagent.EngineInfo{Name: "podman", Version: "3.4.4", APIVersion: "1.41"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routes := map[string]func(*http.Request) *http.Response{
				"GET /info": jsonReply(t, map[string]any{"SecurityOptions": tt.secOpts}),
			}
			if tt.version != nil {
				routes["GET /version"] = jsonReply(t, tt.version)
			}
			rt, f := newFake(t, tt.podman, routes)
			got, err := rt.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Info = %+v, want %+v", got, tt.want)
			}
			if f.called("GET /version") != tt.wantVersion {
				t.Errorf("/version asked = %v, want %v (Podman's is slow)", !tt.wantVersion, tt.wantVersion)
			}
		})
	}
}

func TestInfoDeadEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	rt, err := New(context.Background(), Options{Host: "unix:///nonexistent/sandbox-agent-test.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if _, err := rt.Info(context.Background()); !errors.Is(err, sandboxagent.ErrEngineUnavailable) {
		t.Fatalf("Info on a dead engine: %v, want ErrEngineUnavailable", err)
	}
}

// inspectJSON is a compat inspect answer for a sandbox created with
// CapDrop ALL + CapAdd CHOWN,KILL, as each engine reports it.
func inspectJSON(capAdd, capDrop, secOpt []string) map[string]any {
	return map[string]any{
		"Id": "c1", "Name": "/sb", "Image": "sha256:abc", "Created": "2026-11-29T10:18:54.32713376Z",
		"Config": map[string]any{"Image": "debian:stable-slim", "User": "", "Labels": map[string]string{"sandbox-agent.managed": "true"}},
		"State":  map[string]any{"Status": "created"},
		"HostConfig": map[string]any{
			"CapAdd": capAdd, "CapDrop": capDrop, "SecurityOpt": secOpt, "Init": true, "PidsLimit": 1024,
			"Memory": 4 << 30, "MemorySwap": 4 << 30, "NanoCpus": 2e9, "NetworkMode": "none", "AutoRemove": true,
		},
	}
}

func TestInspectCapabilities(t *testing.T) {
	// Podman's compat inspect lists the dropped defaults, not "ALL".
	podmanDrop := []string{"AUDIT_WRITE", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD", "NET_BIND_SERVICE", "NET_RAW",
		"SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
	tests := []struct {
		name         string
		podman       string
		compat       map[string]any
		libpod       func(*http.Request) *http.Response
		wantDrop     []string
		wantAdd      []string
		wantLibpod   bool
		wantNotFound bool
	}{
		{name: "docker as asked", compat: inspectJSON([]string{"CHOWN", "KILL"}, []string{"ALL"}, []string{"no-new-privileges:true"}),
			wantDrop: []string{"ALL"}, wantAdd: []string{"CHOWN", "KILL"}},
		{name: "podman bounding set", podman: "4.3.1", compat: inspectJSON([]string{}, podmanDrop, []string{"no-new-privileges"}),
			libpod:   jsonReply(t, map[string]any{"Id": "c1", "BoundingCaps": []string{"CAP_CHOWN", "CAP_KILL"}, "EffectiveCaps": []string{"CAP_CHOWN", "CAP_KILL"}}),
			wantDrop: []string{"ALL"}, wantAdd: []string{"CHOWN", "KILL"}, wantLibpod: true},
		{name: "podman no caps at all", podman: "4.3.1", compat: inspectJSON(nil, podmanDrop, nil),
			libpod:   jsonReply(t, map[string]any{"Id": "c1", "BoundingCaps": nil}),
			wantDrop: []string{"ALL"}, wantAdd: []string{}, wantLibpod: true},
		{name: "old podman without BoundingCaps keeps compat", podman: "2.0.0", compat: inspectJSON(nil, podmanDrop, nil),
			libpod:   jsonReply(t, map[string]any{"Id": "c1"}),
			wantDrop: podmanDrop, wantAdd: nil, wantLibpod: true},
		{name: "podman container removed meanwhile", podman: "4.3.1", compat: inspectJSON(nil, podmanDrop, nil),
			libpod:     errReply(http.StatusNotFound, "no container with name or ID \"c1\" found: no such container"),
			wantLibpod: true, wantNotFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routes := map[string]func(*http.Request) *http.Response{"GET /containers/c1/json": jsonReply(t, tt.compat)}
			if tt.libpod != nil {
				routes["GET /libpod/containers/c1/json"] = tt.libpod
			}
			rt, f := newFake(t, tt.podman, routes)
			st, err := rt.Inspect(context.Background(), "c1")
			if tt.wantNotFound {
				if !errors.Is(err, sandboxagent.ErrContainerNotFound) {
					t.Fatalf("Inspect: %v, want ErrContainerNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(st.CapDrop, tt.wantDrop) || !slices.Equal(st.CapAdd, tt.wantAdd) {
				t.Errorf("CapDrop=%v CapAdd=%v, want %v %v", st.CapDrop, st.CapAdd, tt.wantDrop, tt.wantAdd)
			}
			if f.called("GET /libpod/containers/c1/json") != tt.wantLibpod {
				t.Errorf("libpod inspect asked = %v, want %v", !tt.wantLibpod, tt.wantLibpod)
			}
			if !st.Init || st.PidsLimit != 1024 || st.NetworkMode != "none" || st.MemorySwap != 4<<30 || st.Image != "debian:stable-slim" {
				t.Errorf("state %+v", st)
			}
		})
	}
}

// The libpod request carries the engine's own libpod API version (an older
// Podman refuses a newer one).
func TestLibpodPathVersion(t *testing.T) {
	var path string
	rt, _ := newFake(t, "3.4.4", map[string]func(*http.Request) *http.Response{
		"GET /containers/c1/json": jsonReply(t, inspectJSON(nil, nil, nil)),
		"GET /libpod/containers/c1/json": func(r *http.Request) *http.Response {
			path = r.URL.Path
			return reply(http.StatusOK, `{"BoundingCaps":[]}`)
		},
	})
	if _, err := rt.Inspect(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if path != "/v3.4.4/libpod/containers/c1/json" {
		t.Fatalf("libpod path %q", path)
	}
}

func TestErrorClassification(t *testing.T) {
	const podman = "4.3.1"
	type call func(*Runtime) error
	kill := func(r *Runtime) error { return r.Kill(context.Background(), "c1") }
	start := func(r *Runtime) error { return r.Start(context.Background(), "c1") }
	inspect := func(r *Runtime) error { _, err := r.Inspect(context.Background(), "c1"); return err }
	copyFrom := func(r *Runtime) error { _, err := r.CopyFrom(context.Background(), "c1", "/x"); return err }
	copyTo := func(r *Runtime) error {
		return r.CopyTo(context.Background(), "c1", "/x", bytes.NewReader(nil))
	}
	exec := func(r *Runtime) error {
		_, err := r.Exec(context.Background(), "c1", sandboxagent.RuntimeExec{Cmd: []string{"true"}})
		return err
	}
	create := func(r *Runtime) error {
		_, err := r.Create(context.Background(), sandboxagent.ContainerSpec{Image: "no/such:1"})
		return err
	}
	tests := []struct {
		name   string
		podman string
		route  string
		resp   func(*http.Request) *http.Response
		call   call
		want   error // nil: success
	}{
		{"docker kill stopped", "", "POST /containers/c1/kill", errReply(409, "Container c1 is not running"), kill, nil},
		{"podman kill stopped", podman, "POST /containers/c1/kill",
			errReply(500, "can only kill running containers. c1 is in state exited: container state improper"), kill, nil},
		{"docker kill missing", "", "POST /containers/c1/kill", errReply(404, "No such container: c1"), kill, nil},
		{"podman kill missing", podman, "POST /containers/c1/kill",
			errReply(404, `no container with name or ID "c1" found: no such container`), kill, nil},
		{"podman start missing", podman, "POST /containers/c1/start",
			errReply(404, `no container with name or ID "c1" found: no such container`), start, sandboxagent.ErrContainerNotFound},
		{"podman inspect while removed (500)", podman, "GET /containers/c1/json",
			errReply(500, "container has already been removed"), inspect, sandboxagent.ErrContainerNotFound},
		{"docker copy from missing path", "", "GET /containers/c1/archive",
			errReply(404, "Could not find the file /x in container c1"), copyFrom, sandboxagent.ErrPathNotFound},
		{"podman copy from missing path", podman, "GET /containers/c1/archive",
			errReply(404, "no such file or directory"), copyFrom, sandboxagent.ErrPathNotFound},
		{"podman copy from a path gone between stat and copy (500)", podman, "GET /containers/c1/archive",
			errReply(500, "no such file or directory"), copyFrom, sandboxagent.ErrPathNotFound},
		{"podman copy from a path in a removed container (500)", podman, "GET /containers/c1/archive",
			errReply(500, "container has already been removed: no such file or directory"), copyFrom, sandboxagent.ErrContainerNotFound},
		{"docker copy from removed container", "", "GET /containers/c1/archive",
			errReply(404, "No such container: c1"), copyFrom, sandboxagent.ErrContainerNotFound},
		{"podman copy from removed container", podman, "GET /containers/c1/archive",
			errReply(404, `no container with name or ID "c1" found: no such container`), copyFrom, sandboxagent.ErrContainerNotFound},
		{"podman copy to missing dir", podman, "PUT /containers/c1/archive",
			errReply(404, "no such file or directory"), copyTo, sandboxagent.ErrPathNotFound},
		{"docker exec in stopped container", "", "POST /containers/c1/exec",
			errReply(409, "Container c1 is not running"), exec, sandboxagent.ErrContainerNotFound},
		{"podman exec in stopped container", podman, "POST /containers/c1/exec",
			errReply(500, "can only create exec sessions on running containers: container state improper"), exec, sandboxagent.ErrContainerNotFound},
		{"podman exec in removed container", podman, "POST /containers/c1/exec",
			errReply(404, `no container with name or ID "c1" found: no such container`), exec, sandboxagent.ErrContainerNotFound},
		{"docker missing image", "", "POST /containers/create",
			errReply(404, "No such image: no/such:1"), create, sandboxagent.ErrImageNotFound},
		{"podman missing image", podman, "POST /containers/create",
			errReply(404, "no such image: docker.io/no/such:1: image not known"), create, sandboxagent.ErrImageNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, _ := newFake(t, tt.podman, map[string]func(*http.Request) *http.Response{tt.route: tt.resp})
			err := tt.call(rt)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("got %v, want success", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			// A missing path is never reported as a missing container and
			// the other way round.
			if errors.Is(tt.want, sandboxagent.ErrPathNotFound) && errors.Is(err, sandboxagent.ErrContainerNotFound) {
				t.Fatalf("%v is also ErrContainerNotFound", err)
			}
		})
	}
}

func TestRemoveWaitsForAutoRemove(t *testing.T) {
	for _, tt := range []struct {
		name, podman string
		rm           func(*http.Request) *http.Response
		gone         func(*http.Request) *http.Response
	}{
		{"docker removal in progress", "", errReply(409, "removal of container c1 is already in progress"),
			errReply(404, "No such container: c1")},
		{"podman already removed", "4.3.1", errReply(500, "container has already been removed"),
			errReply(404, `no container with name or ID "c1" found: no such container`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			inspects := 0
			rt, _ := newFake(t, tt.podman, map[string]func(*http.Request) *http.Response{
				"DELETE /containers/c1": tt.rm,
				"GET /containers/c1/json": func(r *http.Request) *http.Response {
					mu.Lock()
					defer mu.Unlock()
					inspects++
					if inspects < 3 { // still exiting
						return jsonReply(t, inspectJSON(nil, nil, nil))(r)
					}
					return tt.gone(r)
				},
			})
			if err := rt.Remove(context.Background(), "c1"); err != nil {
				t.Fatal(err)
			}
			if inspects != 3 {
				t.Fatalf("Remove returned after %d inspects, want 3", inspects)
			}
		})
	}
}

// A force-remove the engine answered 204 is done: no inspect follows.
func TestRemoveDoneAtOnce(t *testing.T) {
	inspects := 0
	rt, _ := newFake(t, "", map[string]func(*http.Request) *http.Response{
		"DELETE /containers/c1": func(*http.Request) *http.Response {
			return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Header: http.Header{}}
		},
		"GET /containers/c1/json": func(r *http.Request) *http.Response {
			inspects++
			return errReply(404, "No such container: c1")(r)
		},
	})
	if err := rt.Remove(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if inspects != 0 {
		t.Fatalf("Remove inspected %d times after a 204", inspects)
	}
}

// archiveReply answers GET /archive with a stat header and a tar body.
func archiveReply(t *testing.T, stat map[string]any, body []byte) func(*http.Request) *http.Response {
	sj, err := json.Marshal(stat)
	if err != nil {
		t.Fatal(err)
	}
	return func(*http.Request) *http.Response {
		r := reply(http.StatusOK, string(body))
		r.Header.Set("Content-Type", "application/x-tar")
		r.Header.Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(sj))
		return r
	}
}

func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func readTar(t *testing.T, rc io.ReadCloser) []*tar.Header {
	t.Helper()
	defer rc.Close()
	var out []*tar.Header
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
}

func TestCopyFromSymlinkIsNotFollowed(t *testing.T) {
	symlinkMode := uint32(os.ModeSymlink | 0o777)
	mtime := time.Date(2026, 11, 29, 10, 25, 48, 0, time.UTC)
	tests := []struct {
		name   string
		podman string
		stat   map[string]any
		body   []byte
		want   tar.Header
	}{
		// Podman resolves the link: the stat names the target, the body
		// holds the target's content under the link's name.
		{"podman follows", "4.3.1",
			map[string]any{"name": "passwd", "size": 11, "mode": symlinkMode, "mtime": mtime, "linkTarget": "/etc/passwd"},
			tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: "l", Size: 839, Mode: 0o644}),
			tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc/passwd"}},
		{"docker sends the link", "",
			map[string]any{"name": "l", "size": 11, "mode": symlinkMode, "mtime": mtime, "linkTarget": "/etc/passwd"},
			tarOf(t, &tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc/passwd", Mode: 0o777}),
			tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc/passwd"}},
		// Podman fills linkTarget for regular files too: mode bits decide.
		{"podman regular file with linkTarget", "4.3.1",
			map[string]any{"name": "hostname", "size": 3, "mode": 0o644, "mtime": mtime, "linkTarget": "/etc/hostname"},
			tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: "hostname", Size: 3, Mode: 0o644}),
			tar.Header{Typeflag: tar.TypeReg, Name: "hostname"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, _ := newFake(t, tt.podman, map[string]func(*http.Request) *http.Response{
				"GET /containers/c1/archive": archiveReply(t, tt.stat, tt.body),
			})
			name := "/" + tt.want.Name
			rc, err := rt.CopyFrom(context.Background(), "c1", name)
			if err != nil {
				t.Fatal(err)
			}
			hdrs := readTar(t, rc)
			if len(hdrs) != 1 {
				t.Fatalf("%d entries, want 1", len(hdrs))
			}
			h := hdrs[0]
			if h.Typeflag != tt.want.Typeflag || h.Name != tt.want.Name || h.Linkname != tt.want.Linkname {
				t.Fatalf("entry %q type %c -> %q, want %q type %c -> %q", h.Name, h.Typeflag, h.Linkname,
					tt.want.Name, tt.want.Typeflag, tt.want.Linkname)
			}
		})
	}
}

// Engine detection comes from any response, so the first call already
// knows (the client's negotiation ping is that response).
func TestPodmanDetectedFromFirstResponse(t *testing.T) {
	rt, f := newFake(t, "5.8.0", map[string]func(*http.Request) *http.Response{
		"GET /containers/c1/json":        jsonReply(t, inspectJSON(nil, nil, nil)),
		"GET /libpod/containers/c1/json": jsonReply(t, map[string]any{"BoundingCaps": []string{}}),
	})
	if _, ok := rt.podman(); ok {
		t.Fatal("podman known before any request")
	}
	if _, err := rt.Inspect(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := rt.podman(); !ok || v != "5.8.0" {
		t.Fatalf("podman() = %q %v", v, ok)
	}
	if !f.called("GET /libpod/containers/c1/json") {
		t.Fatal("first Inspect on Podman did not read the bounding set")
	}
}

func TestDropOnly(t *testing.T) {
	def := []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
	tests := []struct {
		name            string
		want            []string
		wantDrop, wantA []string
	}{
		{"sandbox defaults", []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"},
			[]string{"NET_BIND_SERVICE", "SETFCAP", "SETPCAP", "SYS_CHROOT"}, nil},
		{"outside the defaults", []string{"cap_chown", "NET_RAW", "NET_RAW"},
			[]string{"DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"},
			[]string{"NET_RAW"}},
		{"all defaults", def, []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drop, add := dropOnly(def, tt.want)
			if !slices.Equal(drop, tt.wantDrop) || !slices.Equal(add, tt.wantA) {
				t.Fatalf("dropOnly = drop %v add %v, want %v %v", drop, add, tt.wantDrop, tt.wantA)
			}
		})
	}
}

// What Create sends: "drop ALL + add" on Docker; on Podman the same
// bounding set as drops from its default set, so that its non-root users
// are not granted the added capabilities.
func TestCreateCapabilities(t *testing.T) {
	sandboxCaps := []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"}
	podmanInfo := `{"host":{"security":{"capabilities":"CAP_CHOWN,CAP_DAC_OVERRIDE,CAP_FOWNER,CAP_FSETID,CAP_KILL,CAP_NET_BIND_SERVICE,CAP_SETFCAP,CAP_SETGID,CAP_SETPCAP,CAP_SETUID,CAP_SYS_CHROOT"}}}`
	tests := []struct {
		name       string
		podman     string
		spec       sandboxagent.ContainerSpec
		wantDrop   []string
		wantAdd    []string
		wantLibpod bool
	}{
		{name: "docker", spec: sandboxagent.ContainerSpec{CapDrop: []string{"ALL"}, CapAdd: sandboxCaps},
			wantDrop: []string{"ALL"}, wantAdd: sandboxCaps},
		{name: "podman", podman: "4.3.1-test-create", spec: sandboxagent.ContainerSpec{CapDrop: []string{"ALL"}, CapAdd: sandboxCaps},
			wantDrop: []string{"NET_BIND_SERVICE", "SETFCAP", "SETPCAP", "SYS_CHROOT"}, wantAdd: nil, wantLibpod: true},
		{name: "podman, nothing added", podman: "4.3.1-test-none", spec: sandboxagent.ContainerSpec{CapDrop: []string{"ALL"}},
			wantDrop: []string{"ALL"}},
		{name: "podman, privileged", podman: "4.3.1-test-priv", spec: sandboxagent.ContainerSpec{Privileged: true, CapDrop: []string{"ALL"}, CapAdd: sandboxCaps},
			wantDrop: []string{"ALL"}, wantAdd: sandboxCaps},
		{name: "podman, no drop ALL", podman: "4.3.1-test-nodrop", spec: sandboxagent.ContainerSpec{CapAdd: []string{"NET_RAW"}},
			wantAdd: []string{"NET_RAW"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body struct {
				HostConfig struct{ CapAdd, CapDrop []string }
			}
			rt, f := newFake(t, tt.podman, map[string]func(*http.Request) *http.Response{
				"GET /libpod/info": func(*http.Request) *http.Response { return reply(http.StatusOK, podmanInfo) },
				"POST /containers/create": func(r *http.Request) *http.Response {
					if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
						t.Error(err)
					}
					return reply(http.StatusCreated, `{"Id":"c1"}`)
				},
			})
			tt.spec.Image = "img"
			for range 2 { // the second create uses the cached default set
				id, err := rt.Create(context.Background(), tt.spec)
				if err != nil || id != "c1" {
					t.Fatalf("Create = %q, %v", id, err)
				}
				// The client spells capabilities CAP_X on the wire.
				if !slices.Equal(normCaps(body.HostConfig.CapDrop), tt.wantDrop) || !slices.Equal(normCaps(body.HostConfig.CapAdd), tt.wantAdd) {
					t.Fatalf("sent CapDrop %v CapAdd %v, want %v %v", body.HostConfig.CapDrop, body.HostConfig.CapAdd, tt.wantDrop, tt.wantAdd)
				}
			}
			f.mu.Lock()
			n := 0
			for _, k := range f.seen {
				if k == "GET /libpod/info" {
					n++
				}
			}
			f.mu.Unlock()
			if want := map[bool]int{true: 1, false: 0}[tt.wantLibpod]; n != want {
				t.Fatalf("/libpod/info asked %d times, want %d", n, want)
			}
		})
	}
}

func TestCreateDeadEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	rt, err := New(context.Background(), Options{Host: "unix:///nonexistent/sandbox-agent-test.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, err = rt.Create(context.Background(), sandboxagent.ContainerSpec{Image: "img", CapDrop: []string{"ALL"}, CapAdd: []string{"CHOWN"}})
	if !errors.Is(err, sandboxagent.ErrEngineUnavailable) {
		t.Fatalf("Create on a dead engine: %v, want ErrEngineUnavailable", err)
	}
}

// host-gateway in ExtraHosts: passed to Docker and to Podman 5; refused on
// Podman 4, whose compat API would write it into /etc/hosts unresolved.
func TestCreateHostGateway(t *testing.T) {
	tests := []struct {
		name, podman string
		hosts        []string
		refused      bool
	}{
		{"docker", "", []string{"host.docker.internal:host-gateway"}, false},
		{"podman 4", "4.3.1", []string{"gw:10.0.0.1", "host.docker.internal:host-gateway"}, true},
		{"podman 4, = form", "4.9.3", []string{"gw=host-gateway"}, true},
		{"podman 4, plain address", "4.3.1", []string{"gw:10.88.0.1"}, false},
		{"podman 5", "5.0.0", []string{"gw:host-gateway"}, false},
		{"podman, unparsable version", "dev", []string{"gw:host-gateway"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent []string
			rt, f := newFake(t, tt.podman, map[string]func(*http.Request) *http.Response{
				"POST /containers/create": func(r *http.Request) *http.Response {
					var body struct{ HostConfig struct{ ExtraHosts []string } }
					if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
						t.Error(err)
					}
					sent = body.HostConfig.ExtraHosts
					return reply(http.StatusCreated, `{"Id":"c1"}`)
				},
			})
			_, err := rt.Create(context.Background(), sandboxagent.ContainerSpec{Image: "img", ExtraHosts: tt.hosts})
			if tt.refused {
				if !errors.Is(err, sandboxagent.ErrInvalidArgument) || !strings.Contains(err.Error(), "host.containers.internal") {
					t.Fatalf("Create = %v, want ErrInvalidArgument naming host.containers.internal", err)
				}
				if f.called("POST /containers/create") {
					t.Fatal("the container was created anyway")
				}
				return
			}
			if err != nil || !slices.Equal(sent, tt.hosts) {
				t.Fatalf("Create = %v, sent ExtraHosts %v, want %v", err, sent, tt.hosts)
			}
		})
	}
}

// The engines' state words map to the library's.
func TestStatusWords(t *testing.T) {
	for word, want := range map[string]sandboxagent.Status{
		"created": sandboxagent.StatusCreated, "configured": sandboxagent.StatusCreated,
		"running": sandboxagent.StatusRunning, "restarting": sandboxagent.StatusRunning,
		"paused": sandboxagent.StatusPaused, "exited": sandboxagent.StatusExited, "dead": sandboxagent.StatusExited,
		"removing": sandboxagent.StatusExited, "stopped": sandboxagent.StatusExited, "Exited": sandboxagent.StatusExited,
		"": sandboxagent.StatusUnknown, "frozen": sandboxagent.StatusUnknown,
	} {
		if got := status(word); got != want {
			t.Errorf("status(%q) = %q, want %q", word, got, want)
		}
	}
}

// The spec's files become one tar with their folders, rooted at /.
func TestFilesTar(t *testing.T) {
	data, err := filesTar([]sandboxagent.File{{Path: "/sandbox-agent/ca.pem", Data: []byte("PEM"), Mode: 0o644}, {Path: "/sandbox-agent/x/y", Data: nil, Mode: 0o600}})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(data))
	var got []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got = append(got, fmt.Sprintf("%s %o", h.Name, h.Mode))
	}
	if want := "sandbox-agent/ 755,sandbox-agent/ca.pem 644,sandbox-agent/x/ 755,sandbox-agent/x/y 600"; strings.Join(got, ",") != want {
		t.Errorf("tar %v, want %s", got, want)
	}
	for _, bad := range []string{"relative", "/a/../b", "/"} {
		if _, err := filesTar([]sandboxagent.File{{Path: bad}}); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
