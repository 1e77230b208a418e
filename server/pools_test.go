package server

import (
	"encoding/json"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

func TestPoolable(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  CreateRequest
		want bool
	}{
		{"plain", CreateRequest{Driver: "pi", Model: "m", Env: map[string]string{"A": "1"}}, true},
		{"checkpoint", CreateRequest{Driver: "pi", Checkpoint: "ck"}, false},
		{"from", CreateRequest{Driver: "pi", From: &sandboxagent.Checkpoint{}}, false},
		{"repo", CreateRequest{Driver: "pi", Repo: &RepoRequest{}}, false},
		{"fake model script", CreateRequest{Driver: "pi", FakeModelScript: json.RawMessage(`{"responses":[]}`)}, false},
		{"null script", CreateRequest{Driver: "pi", FakeModelScript: json.RawMessage(`null`)}, true},
		{"endpoint", CreateRequest{Driver: "pi", Endpoint: &EndpointRequest{BaseURL: "http://127.0.0.1:1"}}, false},
	} {
		if got := Poolable(tc.req); got != tc.want {
			t.Errorf("%s: Poolable %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Two requests share a pool only when every field and the tenant match.
func TestPoolKey(t *testing.T) {
	base := CreateRequest{Driver: "pi", Model: "m", Memory: "1g"}
	key := func(r CreateRequest) string {
		k, err := poolKey(r)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	same := base
	if key(same) != key(base) {
		t.Error("identical requests: different keys")
	}
	for name, r := range map[string]CreateRequest{
		"tenant": {Driver: "pi", Model: "m", Memory: "1g", Tenant: "acme"},
		"model":  {Driver: "pi", Model: "n", Memory: "1g"},
		"memory": {Driver: "pi", Model: "m", Memory: "2g"},
		"env":    {Driver: "pi", Model: "m", Memory: "1g", Env: map[string]string{"A": "1"}},
	} {
		if key(r) == key(base) {
			t.Errorf("%s differs but the key is the same", name)
		}
	}
}

func TestSharedStop(t *testing.T) {
	stopped := 0
	s := &sharedStop{n: 1, stop: func() { stopped++ }}
	s.acquire()
	s.release()
	if stopped != 0 {
		t.Fatal("stopped while an agent still uses it")
	}
	s.release()
	if stopped != 1 {
		t.Fatalf("stopped %d times after the last release, want 1", stopped)
	}
}
