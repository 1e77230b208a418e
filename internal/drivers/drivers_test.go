package drivers

import (
	"errors"
	"slices"
	"sort"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// versions.json is the one list of CLIs: every CLI it pins has a driver
// here and every driver has a pinned image.
func TestTableMatchesVersions(t *testing.T) {
	pinned := sandboxagent.Versions().CLINames()
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
