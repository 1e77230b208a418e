package catalog

import (
	"errors"
	"strings"
	"testing"
)

const testDigest = "sha256:b31e2d527d25b8fd7cb790d64bd0fb7f82bff71dbe562bca505ae6b23dd12581"

// The committed digests.json parses, and every tag it records is an image
// of versions.json: a bumped image_date must reset or re-record it.
func TestEmbeddedDigestsValid(t *testing.T) {
	m, err := ParseDigests(digestsJSON)
	if err != nil {
		t.Fatalf("embedded digests.json: %v", err)
	}
	tags := map[string]bool{}
	for _, img := range Versions().Images("") {
		tag, ok := refTag(img.Tag)
		if !ok {
			t.Fatalf("no tag in %s", img.Tag)
		}
		tags[tag] = true
	}
	for tag := range m {
		if !tags[tag] {
			t.Errorf("digests.json records %s, which is not an image of versions.json (reset it to {} when image_date changes)", tag)
		}
	}
	_ = ReleasedDigests() // must not panic
}

func TestParseDigests(t *testing.T) {
	m, err := ParseDigests([]byte(`{"pi-0.73.1-20261129": "` + testDigest + `", "base-20261129": "` + testDigest + `"}`))
	if err != nil || len(m) != 2 || m["pi-0.73.1-20261129"] != testDigest {
		t.Fatalf("got %v, %v", m, err)
	}
	if m, err := ParseDigests([]byte("{}\n")); err != nil || len(m) != 0 {
		t.Errorf("empty: %v, %v", m, err)
	}
	for _, bad := range []struct{ doc, msg string }{
		{``, "EOF"},
		{`null`, "got null"},
		{`[]`, "cannot unmarshal"},
		{`{"pi": 3}`, "cannot unmarshal"},
		{`{} {}`, "more than one"},
		{`{"ghcr.io/x/y:pi-1": "` + testDigest + `"}`, "not an image tag"},
		{`{"": "` + testDigest + `"}`, "not an image tag"},
		{`{"pi-1": "sha256:abc"}`, "not a digest"},
		{`{"pi-1": "` + strings.ToUpper(testDigest) + `"}`, "not a digest"},
		{`{"pi-1": "sha512:` + strings.Repeat("a", 128) + `"}`, "not a digest"},
	} {
		if _, err := ParseDigests([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("ParseDigests(%q) = %v, want an error mentioning %q", bad.doc, err, bad.msg)
		}
	}
}

func TestRefTag(t *testing.T) {
	for _, tt := range []struct {
		ref, tag string
		ok       bool
	}{
		{"ghcr.io/sandbox-agent/sandbox-agent:pi-0.73.1-20261129", "pi-0.73.1-20261129", true},
		{"127.0.0.1:5055/sandbox-agent:base-20261129", "base-20261129", true},
		{"pi-0.73.1-20261129", "pi-0.73.1-20261129", true},
		{"127.0.0.1:5055/sandbox-agent", "", false},
		{"ghcr.io/x/y@" + testDigest, "", false},
		{"", "", false},
	} {
		tag, ok := refTag(tt.ref)
		if tag != tt.tag || ok != tt.ok {
			t.Errorf("refTag(%q) = %q, %v; want %q, %v", tt.ref, tag, ok, tt.tag, tt.ok)
		}
	}
}

func TestReleasedDigest(t *testing.T) {
	saved := digestsJSON
	t.Cleanup(func() { digestsJSON = saved; resetDigests() })
	digestsJSON = []byte(`{"pi-0.73.1-20261129": "` + testDigest + `"}`)
	resetDigests()
	for _, ref := range []string{"pi-0.73.1-20261129", "ghcr.io/sandbox-agent/sandbox-agent:pi-0.73.1-20261129", "127.0.0.1:5055/mirror:pi-0.73.1-20261129"} {
		if d, ok := ReleasedDigest(ref); !ok || d != testDigest {
			t.Errorf("ReleasedDigest(%s) = %q, %v", ref, d, ok)
		}
	}
	for _, ref := range []string{"pi-0.73.1-20261130", "ghcr.io/x/y", "ghcr.io/x/y@" + testDigest} {
		if d, ok := ReleasedDigest(ref); ok {
			t.Errorf("ReleasedDigest(%s) = %q, true", ref, d)
		}
	}
	m := ReleasedDigests()
	m["x"] = "y" // a copy
	if _, ok := ReleasedDigests()["x"]; ok {
		t.Error("ReleasedDigests returned the embedded map itself")
	}
}

func TestParseImageVerify(t *testing.T) {
	for in, want := range map[string]Verify{"": VerifyOff, "off": VerifyOff, "strict": VerifyStrict} {
		if got, err := ParseVerify(in); err != nil || got != want {
			t.Errorf("ParseVerify(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseVerify("on"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "want off or strict") {
		t.Errorf("ParseVerify(on) = %v", err)
	}
}
