package sandboxagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// gc removes the socket folder of a sandbox whose owner died, and only a
// folder of the shape sandbox-agent makes, inside this user's socket root.
func TestGCRemovesSocketFolders(t *testing.T) {
	root, err := socketRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "s-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	outside := t.TempDir()
	host, _ := os.Hostname()
	dead := map[string]string{LabelManaged: "true", LabelHost: host, LabelPID: "999999999"}
	with := func(sockets string) map[string]string {
		l := map[string]string{LabelSockets: sockets}
		for k, v := range dead {
			l[k] = v
		}
		return l
	}
	rt := &fakeRuntime{list: []ContainerState{
		{ID: "a", Labels: with(filepath.Base(dir))},
		{ID: "b", Labels: with("../" + filepath.Base(outside))},
		{ID: "c", Labels: with(outside)},
	}}
	res, err := GC(context.Background(), rt, GCOptions{})
	if err != nil || len(res.Removed) != 3 {
		t.Fatalf("gc: %+v %v", res, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket folder of a dead owner kept: %v", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a folder named by a label outside the socket root was touched: %v", err)
	}
}
