package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/runtime/kubernetes/nodeseccomp"
	"github.com/sandbox-agent/sandbox-agent/seccomp"
)

// runSeccomp is `seccomp install`: sandbox-agent's seccomp profile as a
// Kubernetes node's Localhost profile (kubernetes_seccomp_localhost),
// written where the kubelet reads it, under the name the pods ask for.
func runSeccomp(_ context.Context, a *app, args []string) int {
	const usage = "usage: sandbox-agent seccomp install [--kubelet-root DIR]"
	if len(args) == 0 || args[0] != "install" {
		fmt.Fprintln(a.stderr, usage)
		return exitError
	}
	fs := flag.NewFlagSet("seccomp install", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprintln(a.stderr, usage+"\n\nflags:"); fs.PrintDefaults() }
	root := fs.String("kubelet-root", "/var/lib/kubelet", "the kubelet's root directory (its --root-dir); the profile goes to its seccomp folder")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(a.stderr, usage)
		return exitError
	}
	path, err := installSeccomp(*root)
	if err != nil {
		return a.fail(err)
	}
	fmt.Fprintln(a.stdout, path)
	return exitOK
}

// installSeccomp writes the profile under root/seccomp, replacing the
// file whole (a kubelet starting a pod meanwhile reads one version or
// the other, never half of one), and returns its path.
func installSeccomp(root string) (string, error) {
	if root == "" {
		return "", fmt.Errorf("%w: seccomp install: --kubelet-root is empty", sandboxagent.ErrInvalidArgument)
	}
	profile := seccomp.Profile()
	data, err := nodeseccomp.File(profile)
	if err != nil {
		return "", fmt.Errorf("seccomp install: the built-in profile: %w", err)
	}
	path := filepath.Join(root, "seccomp", filepath.FromSlash(nodeseccomp.Path(profile)))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("seccomp install: %w", err)
	}
	if err := writeFileAtomic(path, data, 0o644); err != nil {
		return "", fmt.Errorf("seccomp install: %w", err)
	}
	return path, nil
}
