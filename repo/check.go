package repo

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// object is one object of the quarantine's new pack.
type object struct {
	oid, typ string
	size     int64
}

// catFile streams oids into git cat-file (--batch-check when check,
// --batch otherwise) in q and calls fn for each answer; contents are
// read only for --batch. An object git does not have is an error.
func catFile(ctx context.Context, q git, oids []string, check bool, fn func(o object, data []byte) error) error {
	mode := "--batch"
	if check {
		mode = "--batch-check"
	}
	c := q.cmd(ctx, "cat-file", mode)
	in, err := c.StdinPipe()
	if err != nil {
		return err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	var errb bytes.Buffer
	c.Stderr = &limitedBuffer{buf: &errb, max: 16 << 10}
	if err := c.Start(); err != nil {
		return gitError([]string{"cat-file"}, err, "")
	}
	go func() {
		w := bufio.NewWriter(in)
		for _, o := range oids {
			w.WriteString(o + "\n")
		}
		w.Flush()
		in.Close()
	}()
	r := bufio.NewReaderSize(out, 64<<10)
	ferr := func() error {
		for range oids {
			line, err := r.ReadString('\n')
			if err != nil {
				return fmt.Errorf("git cat-file: %w", err)
			}
			f := strings.Fields(line)
			if len(f) != 3 {
				return fmt.Errorf("git cat-file: %q", clip(line))
			}
			size, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return fmt.Errorf("git cat-file: %q", clip(line))
			}
			o := object{oid: f[0], typ: f[1], size: size}
			var data []byte
			if !check {
				data = make([]byte, size+1)
				if _, err := io.ReadFull(r, data); err != nil {
					return fmt.Errorf("git cat-file: %w", err)
				}
				data = data[:size]
			}
			if err := fn(o, data); err != nil {
				return err
			}
		}
		return nil
	}()
	if ferr != nil {
		c.Process.Kill()
		c.Wait()
		return ferr
	}
	if err := c.Wait(); err != nil {
		return gitError([]string{"cat-file"}, err, errb.String())
	}
	return nil
}

// entry is one entry of a tree object.
type entry struct {
	mode, name, oid string
}

func parseTree(data []byte, rawLen int) ([]entry, error) {
	var es []entry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		nul := bytes.IndexByte(data, 0)
		if sp < 0 || nul < sp || len(data) < nul+1+rawLen {
			return nil, fmt.Errorf("malformed tree")
		}
		es = append(es, entry{mode: string(data[:sp]), name: string(data[sp+1 : nul]), oid: fmt.Sprintf("%x", data[nul+1:nul+1+rawLen])})
		data = data[nul+1+rawLen:]
	}
	return es, nil
}

// ignorable are the code points HFS+ ignores in names: ".g\u200cit" is
// ".git" there (git's is_hfs_dotgit).
func stripIgnorable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
			return -1
		}
		return r
	}, s)
}

// isDotName reports whether a tree entry's name would be dotted on some
// file system: ".git" in any case, with HFS+'s ignorable code points,
// NTFS's trailing dots and spaces, or its 8.3 short name ("git~1").
func isDotName(name, dot, short string) bool {
	n := strings.ToLower(stripIgnorable(name))
	n = strings.TrimRight(n, ". ")
	if s, _, ok := strings.Cut(n, ":"); ok { // NTFS alternate data streams
		n = s
	}
	return n == dot || n == short
}

// checkName refuses a tree entry name no checkout may write.
func checkName(tree, name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return unsafe(tree, "tree entry named %q", name)
	case strings.ContainsAny(name, "/\x00"), strings.Contains(name, "\\"):
		return unsafe(tree, "tree entry %q holds a path separator", clip(name))
	case !utf8.ValidString(name):
		return nil // git allows any bytes; the dot checks below are on text
	case isDotName(name, ".git", "git~1"):
		return unsafe(tree, "tree entry named %q (a .git folder)", clip(name))
	}
	return nil
}

// symlinkClimb checks a symlink's target: relative, with any ".." only as
// leading components, and returns how many folders it climbs. A target
// of that form stays in the repository when the link's folder is at least
// that deep, whatever other links it crosses (each is checked alike).
func symlinkClimb(blob, target string) (int, error) {
	if target == "" || strings.ContainsRune(target, 0) {
		return 0, unsafe(blob, "empty symlink target")
	}
	if strings.Contains(target, "\\") {
		// A path separator on Windows: a\..\..\x climbs there.
		return 0, unsafe(blob, "symlink target %q holds a backslash", clip(target))
	}
	if strings.HasPrefix(target, "/") || strings.HasPrefix(target, "\\") || (len(target) > 1 && target[1] == ':') {
		return 0, unsafe(blob, "symlink to the absolute path %q", clip(target))
	}
	climb, down := 0, false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if down {
				return 0, unsafe(blob, "symlink target %q climbs after it descends", clip(target))
			}
			climb++
		default:
			down = true
		}
	}
	return climb, nil
}

// checkGitmodules refuses a .gitmodules whose submodules a later
// "git submodule update" could turn into a command on the host: a URL of
// a command transport (ext::, fd::) or an option, an update "!command",
// a path or name that is an option or climbs.
func checkGitmodules(blob string, list []byte) error {
	for _, kv := range bytes.Split(list, []byte{0}) {
		if len(kv) == 0 {
			continue
		}
		k, v, _ := strings.Cut(string(kv), "\n")
		if !strings.HasPrefix(k, "submodule.") {
			continue
		}
		name, key := k[len("submodule."):], ""
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			name, key = name[:i], name[i+1:]
		}
		if strings.HasPrefix(name, "-") || strings.Contains(name, "..") {
			return unsafe(blob, ".gitmodules: submodule name %q", clip(name))
		}
		switch key {
		case "url":
			if err := checkSubmoduleURL(v); err != nil {
				return unsafe(blob, ".gitmodules: submodule %q: %v", clip(name), err)
			}
		case "update":
			if strings.HasPrefix(strings.TrimSpace(v), "!") {
				return unsafe(blob, ".gitmodules: submodule %q: update runs the command %q", clip(name), clip(v))
			}
		case "path":
			if strings.HasPrefix(v, "-") || strings.HasPrefix(v, "/") || strings.Contains("/"+v+"/", "/../") {
				return unsafe(blob, ".gitmodules: submodule %q: path %q", clip(name), clip(v))
			}
		}
	}
	return nil
}

func checkSubmoduleURL(u string) error {
	switch {
	case strings.ContainsAny(u, "\n\r\x00"):
		return fmt.Errorf("URL %q holds a control character", clip(u))
	case strings.HasPrefix(u, "-"):
		return fmt.Errorf("URL %q is an option", clip(u))
	case strings.HasPrefix(u, "./") || strings.HasPrefix(u, "../"):
		return nil
	}
	if scheme, rest, ok := strings.Cut(u, "://"); ok {
		switch strings.ToLower(scheme) {
		case "https", "http", "ssh", "git":
			if strings.HasPrefix(rest, "-") {
				return fmt.Errorf("URL %q: host is an option", clip(u))
			}
			return nil
		}
		return fmt.Errorf("URL %q: transport %q is not allowed (https, http, ssh, git or relative)", clip(u), clip(scheme))
	}
	// scp-like [user@]host:path, and nothing with "::" (ext::, fd::).
	host, _, ok := strings.Cut(u, ":")
	if !ok || strings.Contains(u, "::") || host == "" || strings.ContainsAny(host, "/\\") {
		return fmt.Errorf("URL %q is not allowed (https, http, ssh, git, scp-like or relative)", clip(u))
	}
	if h := host[strings.LastIndexByte(host, '@')+1:]; strings.HasPrefix(h, "-") {
		return fmt.Errorf("URL %q: host is an option", clip(u))
	}
	return nil
}
