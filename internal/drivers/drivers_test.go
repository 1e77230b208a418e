package drivers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/drivertest"
	"github.com/sandbox-agent/sandbox-agent/images/catalog"
)

// versions.json is the one list of CLIs: every CLI it pins has a driver
// here and every driver has a pinned image.
func TestTableMatchesVersions(t *testing.T) {
	pinned := catalog.Versions().CLINames()
	var table []string
	for n := range All() {
		table = append(table, n)
	}
	sort.Strings(table)
	want := slices.Clone(pinned)
	sort.Strings(want)
	if !slices.Equal(table, want) {
		t.Fatalf("drivers %v, versions.json CLIs %v: add the driver (or the pin)", table, want)
	}
	if got := Names(); !slices.Equal(got, pinned) {
		t.Errorf("Names() = %v, want versions.json's order %v", got, pinned)
	}
	for _, n := range Names() {
		d, err := New(n, Endpoint{BaseURL: "http://127.0.0.1:1/v1", APIKey: "k", Provider: "p"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Name() != n {
			t.Errorf("driver %q calls itself %q", n, d.Name())
		}
	}
}

func TestNewUnknown(t *testing.T) {
	_, err := New("nope", Endpoint{})
	if !errors.Is(err, sandboxagent.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
}

// Every driver can be routed through the model proxy: its route is the
// endpoint and key it was given, and its routed copy (the same type, so
// the optional interfaces stay) carries only the token and the proxy's
// URL — in its command and in every file its Setup writes.
func TestRoutedDrivers(t *testing.T) {
	const key, token, proxyURL = "sk-real-key-0123456789", "sa-proxy-0123456789abcdef0123456789abcdef", "http://127.0.0.1:4242"
	for _, n := range Names() {
		t.Run(n, func(t *testing.T) {
			d, err := New(n, Endpoint{BaseURL: "http://127.0.0.1:9/v1", APIKey: key, Provider: "sandbox"})
			if err != nil {
				t.Fatal(err)
			}
			r, ok := d.(sandboxagent.ModelRouter)
			if !ok {
				t.Fatalf("%s is not a ModelRouter", n)
			}
			route, err := r.ModelRoute()
			if err != nil || route.Key != key || !strings.HasPrefix(route.Upstream, "http://127.0.0.1:9") {
				t.Fatalf("route %+v, %v", route, err)
			}
			routed := r.Routed(proxyURL+"/v1", token)
			if reflect.TypeOf(routed) != reflect.TypeOf(d) {
				t.Fatalf("Routed returned %T, want %T", routed, d)
			}
			if !slices.Equal(routed.Secrets(), []string{token}) {
				t.Errorf("routed secrets %v", routed.Secrets())
			}
			ops := drivertest.NewHostOps(t)
			ops.Install(t, n, "#!/bin/sh\nexit 0\n") // Setup checks the CLI is there
			ops.Intercept = func(req sandboxagent.ExecRequest) (*sandboxagent.ExecResult, error) {
				if strings.Contains(strings.Join(req.Cmd, " ")+fmt.Sprint(req.Env), key) {
					t.Errorf("Setup ran a command with the key: %v", req.Cmd)
				}
				return nil, nil
			}
			if err := routed.Setup(context.Background(), ops); err != nil {
				t.Fatalf("Setup: %v", err)
			}
			inv, err := routed.Command(sandboxagent.Turn{Prompt: "hi", WorkDir: ops.Work})
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			fmt.Fprint(&all, inv.Cmd, inv.Env)
			filepath.Walk(ops.Root, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() {
					b, _ := os.ReadFile(p)
					all.Write(b)
				}
				return nil
			})
			if strings.Contains(all.String(), key) || strings.Contains(all.String(), "127.0.0.1:9/") {
				t.Errorf("the routed driver still holds the key or the real endpoint")
			}
			if !strings.Contains(all.String(), token) || !strings.Contains(all.String(), proxyURL) {
				t.Errorf("the routed driver's command and files lack the token or the proxy's URL")
			}
		})
	}
}

// Real endpoints: the default upstream of each driver without a BaseURL,
// and a clear error where the endpoint is unknown.
func TestRouteBuiltinProviders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ep       Endpoint
		upstream string
	}{
		{"claude", Endpoint{APIKey: "k"}, "https://api.anthropic.com"},
		{"codex", Endpoint{APIKey: "k"}, "https://api.openai.com/v1"},
		{"dsh", Endpoint{APIKey: "k"}, "https://api.deepseek.com"},
		{"opencode", Endpoint{APIKey: "k", Provider: "zhipuai-coding-plan"}, "https://open.bigmodel.cn/api/coding/paas/v4"},
		{"opencode", Endpoint{APIKey: "k", Provider: "someone-else"}, ""},
		{"pi", Endpoint{APIKey: "k"}, ""},
	} {
		d, err := New(tc.name, tc.ep)
		if err != nil {
			t.Fatal(err)
		}
		route, err := d.(sandboxagent.ModelRouter).ModelRoute()
		switch {
		case tc.upstream == "" && !errors.Is(err, sandboxagent.ErrInvalidArgument):
			t.Errorf("%s %+v: err %v, want ErrInvalidArgument", tc.name, tc.ep, err)
		case tc.upstream != "" && (err != nil || route.Upstream != tc.upstream):
			t.Errorf("%s %+v: %+v %v, want %s", tc.name, tc.ep, route, err, tc.upstream)
		}
	}
}
