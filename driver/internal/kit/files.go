package kit

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// Files is a directory of the sandbox a driver writes the CLI's files to;
// paths are relative to it. Shell is one (the files are written by an sh
// script as the sandbox's user); OpsDir is another (ContainerOps.WriteFile).
type Files interface {
	WriteFile(ctx context.Context, c sandboxagent.ContainerOps, rel string, data []byte, mode fs.FileMode) error
	// Remove removes rel and all it holds; a missing one is no error.
	Remove(ctx context.Context, c sandboxagent.ContainerOps, rel string) error
}

// OpsDir is the directory Root (an absolute path found at run time),
// written through ContainerOps.WriteFile.
type OpsDir struct {
	Driver string // errors start with it
	Root   string
}

var _ Files = OpsDir{}

// WriteFile writes Root/rel with ContainerOps.WriteFile.
func (d OpsDir) WriteFile(ctx context.Context, c sandboxagent.ContainerOps, rel string, data []byte, mode fs.FileMode) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	return c.WriteFile(ctx, d.Root+"/"+rel, data, mode)
}

// Remove runs rm -rf on Root/rel.
func (d OpsDir) Remove(ctx context.Context, c sandboxagent.ContainerOps, rel string) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	res, err := c.Run(ctx, sandboxagent.ExecRequest{Cmd: []string{"rm", "-rf", "--", d.Root + "/" + rel}})
	switch {
	case err != nil:
		return fmt.Errorf("%s: remove %s: %w", d.Driver, rel, err)
	case res.TimedOut:
		return fmt.Errorf("%s: remove %s: %w", d.Driver, rel, sandboxagent.ErrTimeout)
	case res.ExitCode != 0:
		return fmt.Errorf("%s: remove %s: exit %d: %s", d.Driver, rel, res.ExitCode, FirstLine(string(res.Stderr)))
	}
	return nil
}

// FileMode gives the mode a skill file is installed with.
type FileMode func(data []byte) fs.FileMode

// PlainFiles installs every file with mode 644.
func PlainFiles([]byte) fs.FileMode { return 0o644 }

// ExecScripts installs a file that starts with "#!" with mode 755, any
// other with 644.
func ExecScripts(data []byte) fs.FileMode {
	if bytes.HasPrefix(data, []byte("#!")) {
		return 0o755
	}
	return 0o644
}

// InstallSkill writes the skill's files to dir/<name>/ in f, in name
// order, after removing an earlier skill of that name. The skill was
// validated (Skill.Validate) by Agent.InstallSkill; InstallSkill only
// refuses a name or a file path that would make it remove or write
// outside dir/<name>.
func InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, f Files, dir string, s sandboxagent.Skill, mode FileMode) error {
	if !fs.ValidPath(s.Name) || strings.Contains(s.Name, "/") || s.Name == "." {
		return fmt.Errorf("%w: skill name %q", sandboxagent.ErrInvalidArgument, s.Name)
	}
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		if !fs.ValidPath(n) || n == "." {
			return fmt.Errorf("%w: skill %q file path %q", sandboxagent.ErrInvalidArgument, s.Name, n)
		}
		names = append(names, n)
	}
	sdir := path.Join(dir, s.Name)
	if err := f.Remove(ctx, c, sdir); err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if err := f.WriteFile(ctx, c, path.Join(sdir, n), s.Files[n], mode(s.Files[n])); err != nil {
			return err
		}
	}
	return nil
}

// InstallRules writes rules to the file rel in f, replacing it; empty
// rules remove it.
func InstallRules(ctx context.Context, c sandboxagent.ContainerOps, f Files, rel, rules string) error {
	if rules == "" {
		return f.Remove(ctx, c, rel)
	}
	return f.WriteFile(ctx, c, rel, []byte(rules), 0o644)
}

// Instructions implements sandboxagent.SkillInstaller and
// sandboxagent.RulesInstaller for a CLI that reads its rules from one file
// and its skills from one folder, both in Files: embed it in the driver.
type Instructions struct {
	Files     Files
	RulesFile string   // relative to Files
	SkillsDir string   // relative to Files; a skill is SkillsDir/<name>/
	Mode      FileMode // the mode of each skill file
}

// InstallSkill puts the skill in SkillsDir/<name>/, replacing any skill
// of that name.
func (i Instructions) InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error {
	return InstallSkill(ctx, c, i.Files, i.SkillsDir, s, i.Mode)
}

// InstallRules writes RulesFile (empty rules remove it).
func (i Instructions) InstallRules(ctx context.Context, c sandboxagent.ContainerOps, rules string) error {
	return InstallRules(ctx, c, i.Files, i.RulesFile, rules)
}
