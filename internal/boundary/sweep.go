package boundary

import (
	"context"
	"errors"
	"github.com/sandbox-agent/sandbox-agent/internal/lazyre"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// minSweepAge: a socket folder younger than this is never swept.
const minSweepAge = 10 * time.Minute

// socketDirName is the shape of a socket folder: s-<PID>-<random> (the
// PID of its owner), or s-<random> as made before the PID was in it.
var (
	socketDirName  = lazyre.New(`^s-[0-9]+(-[0-9]+)?$`)
	socketDirOwner = lazyre.New(`^s-([0-9]+)-[0-9]+$`)
)

// RemoveSocketDir removes the socket folder a dead owner left behind. The
// label names only the folder's base name, and only one of the shape
// Open makes is removed from this user's socket root.
func RemoveSocketDir(name string) {
	if !socketDirName.MatchString(name) {
		return
	}
	root, err := SocketRoot()
	if err != nil {
		return
	}
	_ = os.RemoveAll(filepath.Join(root, name))
}

// SweepSocketDirs removes the socket folders under root that no process
// serves any more and that no container names (inUse, asked last: it may
// cost an engine call), and returns them. dryRun only lists them.
func SweepSocketDirs(root string, inUse func(name string) bool, dryRun bool) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		dir := filepath.Join(root, name)
		if !e.IsDir() || !socketDirName.MatchString(name) || !socketDirStale(dir, name) || inUse(name) {
			continue
		}
		if !dryRun && os.RemoveAll(dir) != nil {
			continue
		}
		out = append(out, dir)
	}
	return out
}

// socketDirStale reports whether a socket folder's owner is gone: the
// PID in its name names no process (a folder of the old shape, without
// it, must be a day old) and none of its sockets accepts a connection.
// The sockets are asked too because a PID only means something in our
// pid namespace: a live owner in another one sharing this folder (two
// containers with one /tmp) still listens.
func socketDirStale(dir, name string) bool {
	fi, err := os.Stat(dir)
	if err != nil || time.Since(fi.ModTime()) < minSweepAge {
		// Young: its owner may have just died and its sandbox await
		// adoption (a restarted server). The engine's listing is then all
		// that keeps it, and one listing without the sandbox would strand
		// it (a folder vanished under a running sandbox once on Podman).
		return false
	}
	if m := socketDirOwner.FindStringSubmatch(name); m != nil {
		if ProcessAlive(m[1]) {
			return false
		}
	} else if time.Since(fi.ModTime()) < 24*time.Hour {
		return false
	}
	socks, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return false
	}
	for _, p := range socks {
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		// Only a certain "nobody listens" proves it; a full backlog or a
		// timeout is somebody.
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return false
		}
	}
	return true
}

var sweepOnce sync.Once

// SweepOnce runs SweepSocketDirs on this user's socket root once per
// process, in the background, inUse asked under a minute's deadline.
func SweepOnce(inUse func(ctx context.Context, name string) bool) {
	sweepOnce.Do(func() {
		go func() {
			root, err := SocketRoot()
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			SweepSocketDirs(root, func(name string) bool { return inUse(ctx, name) }, false)
		}()
	})
}

// ProcessAlive reports whether pid names a live process on this host.
func ProcessAlive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	err = syscall.Kill(n, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
