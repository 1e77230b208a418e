package docker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/checkpoint"
)

// commitFake is an engine with container c1 on base image sha256:base;
// committing it makes sha256:new, whose inspect answer is newImage.
type commitFake struct {
	mu      sync.Mutex
	query   url.Values // of the commit request
	body    string
	removed []string
}

func (cf *commitFake) routes(t *testing.T, ctr, base, newImage map[string]any) map[string]func(*http.Request) *http.Response {
	return map[string]func(*http.Request) *http.Response{
		"GET /containers/c1/json": func(r *http.Request) *http.Response {
			if r.URL.Query().Get("size") != "1" {
				t.Errorf("container inspect without size: %s", r.URL.RawQuery)
			}
			return jsonReply(t, ctr)(r)
		},
		"GET /images/sha256:base/json": jsonReply(t, base),
		"POST /commit": func(r *http.Request) *http.Response {
			b, _ := io.ReadAll(r.Body)
			cf.mu.Lock()
			cf.query, cf.body = r.URL.Query(), string(b)
			cf.mu.Unlock()
			return reply(http.StatusCreated, `{"Id":"sha256:new"}`)
		},
		"GET /images/sha256:new/json": jsonReply(t, newImage),
		"DELETE /images/sha256:new": func(r *http.Request) *http.Response {
			cf.mu.Lock()
			cf.removed = append(cf.removed, "sha256:new")
			cf.mu.Unlock()
			return reply(http.StatusOK, `[{"Deleted":"sha256:new"}]`)
		},
	}
}

func TestCommit(t *testing.T) {
	const secret = "hunter2"
	ours := map[string]string{"sandbox-agent.checkpoint": `ck-1 $HOME "q" \`}
	ctr := func(sizeRw int64, env ...string) map[string]any {
		return map[string]any{
			"Id": "c1", "Image": "sha256:base", "SizeRw": sizeRw,
			"Config": map[string]any{
				"Image": "debian:stable-slim", "Hostname": "c1host", "Env": env,
				"Labels": map[string]string{"org.base": "b", "sandbox-agent.owner": "x", "sandbox-agent.checkpoint": "old"},
			},
		}
	}
	base := func(env ...string) map[string]any {
		return map[string]any{"Id": "sha256:base", "Size": 1000, "Config": map[string]any{"Env": env, "Labels": map[string]string{"org.base": "b"}}}
	}
	image := func(size int64, env []string, labels map[string]string) map[string]any {
		return map[string]any{"Id": "sha256:new", "Size": size, "Config": map[string]any{"Env": env, "Labels": labels}}
	}
	goodLabels := map[string]string{"org.base": "b", "sandbox-agent.owner": "", "sandbox-agent.checkpoint": ours["sandbox-agent.checkpoint"]}
	tests := []struct {
		name        string
		podman      string
		ctr, base   map[string]any
		image       map[string]any
		labels      map[string]string
		max         int64
		wantErr     error
		wantSize    int64
		wantCommit  bool
		wantRemoved bool
		wantChanges []string
	}{
		{
			name:   "docker: env and labels reset, ours added and escaped",
			ctr:    ctr(10, "PATH=/usr/bin:/bin", "LANG=xx", "SECRET="+secret, "ODD=a\"b$c"),
			base:   base("PATH=/usr/bin:/bin", "LANG=C.UTF-8"),
			image:  image(1500, []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "SECRET=", "ODD="}, goodLabels),
			labels: ours, max: 1 << 20, wantSize: 500, wantCommit: true,
			wantChanges: []string{
				`ENV "LANG"="C.UTF-8"`,
				`ENV "ODD"=""`,
				`ENV "PATH"="/usr/bin:/bin"`,
				`ENV "SECRET"=""`,
				`LABEL "org.base"="b"`,
				`LABEL "sandbox-agent.owner"=""`,
				`LABEL "sandbox-agent.checkpoint"="ck-1 \$HOME \"q\" \\"`,
			},
		},
		{
			// Podman 4 takes the quoted text literally, and adds variables of
			// its own: PATH, TERM and container are kept (an empty one would
			// override the engine's), HOME and HOSTNAME it derives at start.
			name: "podman 4: literal quoting, the engine's own variables kept", podman: "4.3.1",
			ctr:    ctr(10, "PATH="+defaultPath, "TERM=xterm", "container=podman", "SECRET="+secret, "HOME=/root", "HOSTNAME=c1host"),
			base:   base(),
			image:  image(1000, []string{"PATH=" + defaultPath, "TERM=xterm", "container=podman", "SECRET=", "HOSTNAME=c1host"}, goodLabels),
			labels: ours, max: 1 << 20, wantSize: 0, wantCommit: true,
			wantChanges: []string{
				`ENV "PATH"="` + defaultPath + `"`,
				`ENV "SECRET"=""`,
				`ENV "TERM"="xterm"`,
				`ENV "container"="podman"`,
				`LABEL "org.base"="b"`,
				`LABEL "sandbox-agent.owner"=""`,
				`LABEL "sandbox-agent.checkpoint"="ck-1 $HOME "q" \"`,
			},
		},
		{
			name: "podman 5 parses as Docker does", podman: "5.2.0",
			ctr: ctr(10, "SECRET="+secret), base: base(),
			image:  image(1000, []string{"SECRET="}, goodLabels),
			labels: ours, wantCommit: true,
			wantChanges: []string{
				`ENV "SECRET"=""`,
				`LABEL "org.base"="b"`,
				`LABEL "sandbox-agent.owner"=""`,
				`LABEL "sandbox-agent.checkpoint"="ck-1 \$HOME \"q\" \\"`,
			},
		},
		{
			name: "too large before the commit: nothing committed",
			ctr:  ctr(2000, "SECRET="+secret), base: base(), labels: ours, max: 1000,
			wantErr: sandboxagent.ErrCheckpointSize,
		},
		{
			name: "grew during the commit: the image is removed",
			ctr:  ctr(10, "SECRET="+secret), base: base(),
			image:  image(1000+5000, []string{"SECRET="}, goodLabels),
			labels: ours, max: 1000, wantErr: sandboxagent.ErrCheckpointSize, wantCommit: true, wantRemoved: true,
		},
		{
			name: "env value kept by the engine: removed, hardening",
			ctr:  ctr(10, "SECRET="+secret), base: base(),
			image:  image(1000, []string{"SECRET=" + secret}, goodLabels),
			labels: ours, wantErr: sandboxagent.ErrHardening, wantCommit: true, wantRemoved: true,
		},
		{
			name: "engine default claimed by a user value: hardening",
			ctr:  ctr(10, "TERM=mine"), base: base(),
			image:  image(1000, []string{"TERM=mine"}, goodLabels),
			labels: ours, wantErr: sandboxagent.ErrHardening, wantCommit: true, wantRemoved: true,
		},
		{
			name: "container label kept by the engine: removed, hardening",
			ctr:  ctr(10), base: base(),
			image:  image(1000, nil, map[string]string{"org.base": "b", "sandbox-agent.owner": "x", "sandbox-agent.checkpoint": ours["sandbox-agent.checkpoint"]}),
			labels: ours, wantErr: sandboxagent.ErrHardening, wantCommit: true, wantRemoved: true,
		},
		{
			name: "our label missing: removed, hardening",
			ctr:  ctr(10), base: base(),
			image:  image(1000, nil, map[string]string{"org.base": "b", "sandbox-agent.owner": "", "sandbox-agent.checkpoint": "old"}),
			labels: ours, wantErr: sandboxagent.ErrHardening, wantCommit: true, wantRemoved: true,
		},
		{
			name: "a label value with a line break is refused before the commit",
			ctr:  ctr(10), base: base(),
			labels: map[string]string{"k": "v\nENV X=1"}, wantErr: sandboxagent.ErrInvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := &commitFake{}
			rt, f := newFake(t, tt.podman, cf.routes(t, tt.ctr, tt.base, tt.image))
			size, err := rt.Commit(context.Background(), "c1", "sandbox-agent-checkpoint:ck-1", func(int64) map[string]string { return tt.labels }, tt.max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Commit: %v, want %v", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error shows the container's secret: %v", err)
				}
			} else if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if got := f.called("POST /commit"); got != tt.wantCommit {
				t.Fatalf("commit called = %v, want %v", got, tt.wantCommit)
			}
			if got := len(cf.removed) > 0; got != tt.wantRemoved {
				t.Errorf("image removed = %v, want %v", got, tt.wantRemoved)
			}
			if !tt.wantCommit {
				return
			}
			q := cf.query
			if q.Get("container") != "c1" || q.Get("repo") != "sandbox-agent-checkpoint" || q.Get("tag") != "ck-1" {
				t.Errorf("commit query %v", q)
			}
			if q.Get("pause") != "true" { // Podman's default is false
				t.Errorf("commit without pause=true: %v", q)
			}
			if cf.body != "{}" { // Podman 4 refuses a commit without a body
				t.Errorf("commit body %q", cf.body)
			}
			if tt.wantChanges != nil && !slices.Equal(q["changes"], tt.wantChanges) {
				t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(q["changes"], "\n"), strings.Join(tt.wantChanges, "\n"))
			}
			if err == nil && size != tt.wantSize {
				t.Errorf("size %d, want %d", size, tt.wantSize)
			}
		})
	}
}

func TestCommitRefusesBadRef(t *testing.T) {
	rt, f := newFake(t, "", nil)
	for _, ref := range []string{"no-tag", "repo:", "host:5000/repo", "repo@sha256:abc", ":tag"} {
		if _, err := rt.Commit(context.Background(), "c1", ref, nil, 0); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("Commit to %q: %v, want ErrInvalidArgument", ref, err)
		}
	}
	if f.called("GET /containers/c1/json") {
		t.Error("a bad reference reached the engine")
	}
}

func TestRemoveImage(t *testing.T) {
	const ref = "sandbox-agent-checkpoint:ck-1"
	inUse := errReply(http.StatusConflict, "conflict: unable to remove repository reference (must force) - container c2 is using its referenced image")
	missing := errReply(http.StatusNotFound, "No such image: "+ref)
	ok := func(*http.Request) *http.Response { return reply(http.StatusOK, `[{"Untagged":"x"}]`) }
	tests := []struct {
		name         string
		podman       string
		direct, host func(*http.Request) *http.Response // ref, localhost/ref
		want         error
	}{
		{"removed", "", ok, nil, nil},
		{"in use", "", inUse, nil, checkpoint.ErrInUse},
		{"missing", "", missing, missing, checkpoint.ErrNotFound},
		{"podman: under localhost/", "4.3.1", missing, ok, nil},
		{"podman: in use under localhost/", "4.3.1", missing, errReply(http.StatusConflict, "image is in use by a container"), checkpoint.ErrInUse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routes := map[string]func(*http.Request) *http.Response{"DELETE /images/" + ref: tt.direct}
			if tt.host != nil {
				routes["DELETE /images/localhost/"+ref] = tt.host
			}
			rt, _ := newFake(t, tt.podman, routes)
			err := rt.RemoveImage(context.Background(), ref)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("RemoveImage: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestImageExists(t *testing.T) {
	for _, tt := range []struct {
		name        string
		direct, loc bool
		want        bool
	}{{"as named", true, false, true}, {"under localhost/", false, true, true}, {"missing", false, false, false}} {
		t.Run(tt.name, func(t *testing.T) {
			routes := map[string]func(*http.Request) *http.Response{}
			if tt.direct {
				routes["GET /images/cp:x/json"] = jsonReply(t, map[string]any{"Id": "sha256:a"})
			}
			if tt.loc {
				routes["GET /images/localhost/cp:x/json"] = jsonReply(t, map[string]any{"Id": "sha256:a"})
			}
			rt, _ := newFake(t, "", routes)
			got, err := rt.ImageExists(context.Background(), "cp:x")
			if err != nil || got != tt.want {
				t.Fatalf("ImageExists = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestImagesNormalisesTags(t *testing.T) {
	const key = "sandbox-agent.checkpoint"
	var filter string
	rt, _ := newFake(t, "4.3.1", map[string]func(*http.Request) *http.Response{
		"GET /images/json": func(r *http.Request) *http.Response {
			filter = r.URL.Query().Get("filters")
			return jsonReply(t, []map[string]any{
				{"Id": "sha256:a", "Created": 100, "Size": 10, "Labels": map[string]string{key: "a"},
					"RepoTags": []string{"localhost/sandbox-agent-checkpoint:a", "docker.io/library/sandbox-agent-checkpoint:a2"}},
				{"Id": "sha256:b", "Created": 200, "Size": 20, "Labels": map[string]string{key: "b"},
					"RepoTags": []string{"sandbox-agent-checkpoint:b"}},
				{"Id": "sha256:dangling", "Labels": map[string]string{key: "d"}, "RepoTags": []string{"<none>:<none>"}},
				{"Id": "sha256:untagged", "Labels": map[string]string{key: "u"}},
				{"Id": "sha256:c", "Created": 300, "Size": 30, "RepoTags": []string{"registry.example:5000/cp:c"}},
			})(r)
		},
		// The list left out c's labels.
		"GET /images/sha256:c/json": jsonReply(t, map[string]any{"Id": "sha256:c", "Config": map[string]any{"Labels": map[string]string{key: "c"}}}),
	})
	imgs, err := rt.Images(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(filter, `"label"`) || !strings.Contains(filter, key) {
		t.Errorf("filters %s", filter)
	}
	var got []string
	for _, img := range imgs {
		got = append(got, img.Ref+" "+img.ID+" "+img.Labels[key])
	}
	want := []string{
		"registry.example:5000/cp:c sha256:c c",
		"sandbox-agent-checkpoint:a sha256:a a",
		"sandbox-agent-checkpoint:a2 sha256:a a",
		"sandbox-agent-checkpoint:b sha256:b b",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Images:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, img := range imgs {
		if img.Ref == "sandbox-agent-checkpoint:b" && (img.Size != 20 || img.Created.Unix() != 200) {
			t.Errorf("b: %+v", img)
		}
	}
}
