package catalog

import (
	"encoding/json"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

func TestEmbeddedVersionsValid(t *testing.T) {
	data, err := fs.ReadFile(Files(), "versions.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseVersions(data)
	if err != nil {
		t.Fatalf("embedded versions.json: %v", err)
	}
	if v.Repo != DefaultRepo {
		t.Errorf("repo = %q, want %q", v.Repo, DefaultRepo)
	}
	if got := strings.Join(v.CLINames(), ","); got != "opencode,codex,claude,pi,dsh" {
		t.Errorf("CLINames = %s", got)
	}
	// Every image has a Dockerfile in the embedded docker/ directory.
	for _, img := range v.Images("") {
		if _, err := fs.Stat(Files(), "docker/Dockerfile."+img.CLI); err != nil {
			t.Errorf("no Dockerfile for %s: %v", img.CLI, err)
		}
	}
	_ = Versions() // must not panic
}

func TestDockerfilesHaveNoPinsOfTheirOwn(t *testing.T) {
	// versions.json is the single source: the CLI Dockerfiles take every
	// version from build args and never say latest.
	for _, cli := range Versions().CLINames() {
		data, err := fs.ReadFile(Files(), "docker/Dockerfile."+cli)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		if strings.Contains(s, "latest") {
			t.Errorf("Dockerfile.%s mentions latest", cli)
		}
		if !strings.Contains(s, "FROM ${BASE_IMAGE}") {
			t.Errorf("Dockerfile.%s is not FROM ${BASE_IMAGE}", cli)
		}
		if v := Versions().CLIs[cli].Version; strings.Contains(s, v) {
			t.Errorf("Dockerfile.%s hard-codes version %s", cli, v)
		}
	}
}

func validVersionsJSON() map[string]any {
	var m map[string]any
	data, _ := fs.ReadFile(Files(), "versions.json")
	if err := json.Unmarshal(data, &m); err != nil {
		panic(err)
	}
	return m
}

func TestParseVersionsRejects(t *testing.T) {
	cli := func(m map[string]any, name string) map[string]any {
		return m["clis"].(map[string]any)[name].(map[string]any)
	}
	tests := []struct {
		name   string
		mutate func(m map[string]any)
		want   string
	}{
		{"bad date", func(m map[string]any) { m["image_date"] = "2026-11-29" }, "image_date"},
		{"impossible month", func(m map[string]any) { m["image_date"] = "20261329" }, "image_date"},
		{"latest version", func(m map[string]any) { cli(m, "claude")["version"] = "latest" }, "clis.claude.version"},
		{"range version", func(m map[string]any) { cli(m, "codex")["version"] = "^0.171.0" }, "clis.codex.version"},
		{"x-range", func(m map[string]any) { cli(m, "pi")["version"] = "0.73.x" }, "clis.pi.version"},
		{"partial version", func(m map[string]any) { cli(m, "pi")["version"] = "0.73" }, "clis.pi.version"},
		{"no cli", func(m map[string]any) { m["clis"] = map[string]any{} }, "clis is empty"},
		{"cli named base", func(m map[string]any) {
			m["clis"].(map[string]any)["base"] = map[string]any{"package": "x", "version": "1.0.0"}
		}, `"base" is not a valid CLI name`},
		{"bad package", func(m map[string]any) { cli(m, "opencode")["package"] = "Opencode AI" }, "clis.opencode.package"},
		{"repo with tag", func(m map[string]any) { m["repo"] = "ghcr.io/x/y:latest" }, "repo"},
		{"node latest", func(m map[string]any) { m["base"].(map[string]any)["node_version"] = "latest" }, "base.node_version"},
		{"override range", func(m map[string]any) {
			cli(m, "dsh")["npm_overrides"].(map[string]any)["@deepseek-ai/cordis"] = ">=4"
		}, "npm_overrides"},
		{"bad integrity", func(m map[string]any) { m["base"].(map[string]any)["npm_integrity"] = "sha1-abc" }, "npm_integrity"},
		{"unknown field", func(m map[string]any) { m["imagedate"] = "20260101" }, "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validVersionsJSON()
			tt.mutate(m)
			data, _ := json.Marshal(m)
			_, err := ParseVersions(data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := ParseVersions([]byte("{")); err == nil {
		t.Error("truncated JSON accepted")
	}
}

func TestCLINamesFollowTheDocument(t *testing.T) {
	// versions.json is the one list of CLIs: its key order is the order
	// they are listed and built in, whatever the names.
	doc := `{"repo":"r/x","image_date":"20260101","base":{"from":"debian:stable-slim","node_version":"1.2.3","npm_version":"1.2.3"},
	  "clis":{"zed":{"package":"zed","version":"1.0.0"},"alpha":{"package":"alpha","version":"2.0.0"},"mid":{"package":"mid","version":"3.0.0"}}}`
	v, err := ParseVersions([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.CLINames(), ","); got != "zed,alpha,mid" {
		t.Errorf("CLINames = %s, want the document's order zed,alpha,mid", got)
	}
	v.CLIs["beta"] = CLISpec{Package: "beta", Version: "1.0.0"}
	if got := strings.Join(v.CLINames(), ","); got != "zed,alpha,mid,beta" {
		t.Errorf("CLINames after adding in code = %s", got)
	}
}

func TestParseVersionsAcceptsPrerelease(t *testing.T) {
	m := validVersionsJSON()
	m["clis"].(map[string]any)["dsh"].(map[string]any)["version"] = "0.1.0-rc.8"
	m["clis"].(map[string]any)["claude"].(map[string]any)["version"] = "2.1.332+build.7"
	data, _ := json.Marshal(m)
	if _, err := ParseVersions(data); err != nil {
		t.Fatal(err)
	}
}

// testVersions is a versions.json parsed as the embedded one is (so its
// CLI order is the document's).
func testVersions() VersionsFile {
	v, err := ParseVersions([]byte(`{"repo": "ghcr.io/sandbox-agent/sandbox-agent", "image_date": "20260102",
	  "base": {"from": "debian:stable-slim", "node_version": "22.23.3", "npm_version": "11.21.2"},
	  "clis": {
	    "opencode": {"package": "opencode-ai", "version": "1.18.33"},
	    "codex": {"package": "@openai/codex", "version": "0.171.0"},
	    "claude": {"package": "@anthropic-ai/claude-code", "version": "2.1.332"},
	    "pi": {"package": "@mariozechner/pi-coding-agent", "version": "0.73.1"},
	    "dsh": {"package": "@deepseek-ai/dsh", "version": "0.1.0-rc.8"}}}`))
	if err != nil {
		panic(err)
	}
	return v
}

func TestTagDerivation(t *testing.T) {
	v := testVersions()
	if err := v.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ghcr.io/sandbox-agent/sandbox-agent:base-20260102",
		"ghcr.io/sandbox-agent/sandbox-agent:opencode-1.18.33-20260102",
		"ghcr.io/sandbox-agent/sandbox-agent:codex-0.171.0-20260102",
		"ghcr.io/sandbox-agent/sandbox-agent:claude-2.1.332-20260102",
		"ghcr.io/sandbox-agent/sandbox-agent:pi-0.73.1-20260102",
		"ghcr.io/sandbox-agent/sandbox-agent:dsh-0.1.0-rc.8-20260102",
	}
	imgs := v.Images("")
	if len(imgs) != len(want) {
		t.Fatalf("%d images, want %d", len(imgs), len(want))
	}
	for i, img := range imgs {
		if img.Tag != want[i] {
			t.Errorf("image %d = %q, want %q", i, img.Tag, want[i])
		}
		if strings.Contains(img.Tag, "latest") {
			t.Errorf("%s says latest", img.Tag)
		}
	}
	s, err := v.Image("dsh", "registry.local:5000/team/sa")
	if err != nil || s.Tag != "registry.local:5000/team/sa:dsh-0.1.0-rc.8-20260102" || s.Package != "@deepseek-ai/dsh" {
		t.Errorf("Image(dsh, private) = %+v, %v", s, err)
	}
	if _, err := v.Image("cursor", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unknown CLI: err = %v, want ErrInvalidArgument", err)
	}
	// Tags are valid Docker references (tag charset, length).
	tagRe := regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	for _, img := range Versions().Images("") {
		tag := img.Tag[strings.LastIndex(img.Tag, ":")+1:]
		if !tagRe.MatchString(tag) {
			t.Errorf("%q is not a valid tag", tag)
		}
	}
}

func TestDefaultImage(t *testing.T) {
	v := Versions()
	for _, cli := range v.CLINames() {
		got, err := DefaultImage(cli)
		if err != nil {
			t.Fatal(err)
		}
		want := v.Repo + ":" + cli + "-" + v.CLIs[cli].Version + "-" + v.ImageDate
		if got != want {
			t.Errorf("DefaultImage(%s) = %q, want %q", cli, got, want)
		}
	}
	if _, err := DefaultImage("nope"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `unknown CLI "nope"`) {
		t.Errorf("DefaultImage(nope) err = %v", err)
	}
}

func TestResolveImagePrecedence(t *testing.T) {
	v := testVersions()
	const builtIn = "ghcr.io/sandbox-agent/sandbox-agent:claude-2.1.332-20260102"
	tests := []struct {
		name                                    string
		cli, explicit, imageName, driverDefault string
		want                                    string
		wantErr                                 error
	}{
		{name: "built-in default", cli: "claude", want: builtIn},
		{name: "driver default beats built-in", cli: "claude", driverDefault: "example.org/drv:claude-1", want: "example.org/drv:claude-1"},
		{name: "image name beats driver default", cli: "claude", imageName: "reg.local/team/sa", driverDefault: "example.org/drv:claude-1",
			want: "reg.local/team/sa:claude-2.1.332-20260102"},
		{name: "image name with port", cli: "pi", imageName: "reg.local:5000/sa", want: "reg.local:5000/sa:pi-0.73.1-20260102"},
		{name: "explicit beats everything", cli: "claude", explicit: "mine/claude:v3", imageName: "reg.local/team/sa", driverDefault: "example.org/drv:claude-1",
			want: "mine/claude:v3"},
		{name: "explicit digest", cli: "claude", explicit: "mine/claude@sha256:" + strings.Repeat("a", 64), want: "mine/claude@sha256:" + strings.Repeat("a", 64)},
		{name: "explicit latest refused", cli: "claude", explicit: "mine/claude:latest", wantErr: ErrInvalidArgument},
		{name: "explicit untagged refused", cli: "claude", explicit: "mine/claude", wantErr: ErrInvalidArgument},
		{name: "explicit registry port untagged refused", cli: "claude", explicit: "reg:5000/claude", wantErr: ErrInvalidArgument},
		{name: "driver default latest refused", cli: "claude", driverDefault: "drv/claude:latest", wantErr: ErrInvalidArgument},
		{name: "image name with tag refused", cli: "claude", imageName: "reg.local/sa:v1", wantErr: ErrInvalidArgument},
		{name: "unknown cli", cli: "cursor", wantErr: ErrInvalidArgument},
		{name: "unknown cli with image name", cli: "cursor", imageName: "reg.local/sa", wantErr: ErrInvalidArgument},
		{name: "unknown cli, driver default", cli: "cursor", imageName: "reg.local/sa", driverDefault: "drv/cursor:1.0", want: "drv/cursor:1.0"},
		{name: "unknown cli, explicit", cli: "cursor", explicit: "x/cursor:2", want: "x/cursor:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := v.Resolve(tt.cli, tt.explicit, tt.imageName, tt.driverDefault)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Resolve = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	// The package-level function uses the embedded file.
	got, err := Resolve("codex", "", "", "")
	want, _ := DefaultImage("codex")
	if err != nil || got != want {
		t.Errorf("Resolve(codex) = %q, %v; want %q", got, err, want)
	}
}

func TestImageFilesHoldsDockerDir(t *testing.T) {
	for _, name := range []string{"versions.json", "docker/Dockerfile.base", "docker/npm-fetch.sh", "docker/README.md"} {
		if _, err := fs.Stat(Files(), name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The committed dsh lock file (npm ci) must install exactly the versions
// versions.json pins; an empty file means "resolve at build time".
func TestDshLockMatchesVersions(t *testing.T) {
	data, err := fs.ReadFile(Files(), "docker/dsh/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		t.Skip("no dsh lock file committed")
	}
	var lock struct {
		Packages map[string]struct {
			Version      string            `json:"version"`
			Dependencies map[string]string `json:"dependencies"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		t.Fatalf("dsh lock: %v", err)
	}
	c := Versions().CLIs["dsh"]
	if got := lock.Packages[""].Dependencies[c.Package]; got != c.Version {
		t.Errorf("lock root depends on %s@%q, versions.json pins %s", c.Package, got, c.Version)
	}
	if got := lock.Packages["node_modules/"+c.Package].Version; got != c.Version {
		t.Errorf("lock installs %s@%s, versions.json pins %s", c.Package, got, c.Version)
	}
	pkgJSON, err := fs.ReadFile(Files(), "docker/dsh/package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
		Overrides    map[string]string `json:"overrides"`
	}
	if err := json.Unmarshal(pkgJSON, &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Dependencies[c.Package] != c.Version {
		t.Errorf("docker/dsh/package.json depends on %s@%q, versions.json pins %s", c.Package, pkg.Dependencies[c.Package], c.Version)
	}
	if len(pkg.Overrides) != len(c.NPMOverrides) {
		t.Errorf("docker/dsh/package.json overrides %v, versions.json npm_overrides %v", pkg.Overrides, c.NPMOverrides)
	}
	for name, want := range c.NPMOverrides {
		if pkg.Overrides[name] != want {
			t.Errorf("docker/dsh/package.json overrides %s to %q, versions.json pins %s", name, pkg.Overrides[name], want)
		}
		for path, p := range lock.Packages {
			if strings.HasSuffix(path, "node_modules/"+name) && p.Version != want {
				t.Errorf("lock installs %s at %s, npm_overrides pins %s", path, p.Version, want)
			}
		}
	}
}
