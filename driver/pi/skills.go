package pi

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Rules are ~/.pi/agent/AGENTS.md, the global context file pi appends to
// its system prompt in every session; skills ~/.pi/agent/skills/<name>/
// (relative to $HOME).
const (
	rulesFile = agentDir + "/AGENTS.md"
	skillsDir = agentDir + "/skills"
)

// instructions installs rules and skills as the sandbox's user.
func instructions() kit.Instructions {
	return kit.Instructions{Files: sh, RulesFile: rulesFile, SkillsDir: skillsDir, Mode: kit.PlainFiles}
}

var _ sandboxagent.SkillInstaller = (*Driver)(nil)

// InstallSkill writes the skill to ~/.pi/agent/skills/<name>/ (replacing
// an earlier one of that name). pi lists it in the system prompt (name and
// description from SKILL.md's front matter) and the model reads it with
// its read tool.
func (d *Driver) InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error {
	if !hasDescription(s.Files["SKILL.md"]) {
		return fmt.Errorf("%w: skill %q: SKILL.md has no front matter with a description (pi silently ignores such a skill)", sandboxagent.ErrInvalidArgument, s.Name)
	}
	return d.Instructions.InstallSkill(ctx, c, s)
}

// hasDescription reports whether a SKILL.md starts with a YAML front
// matter block that has a non-empty description, which pi requires to list
// the skill.
func hasDescription(md []byte) bool {
	text := strings.ReplaceAll(string(bytes.TrimPrefix(md, []byte("\ufeff"))), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return false
	}
	for _, l := range strings.Split(rest, "\n") {
		if strings.TrimRight(l, " \t") == "---" {
			return false
		}
		if v, ok := strings.CutPrefix(l, "description:"); ok && strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// Rules: kit.Instructions (see New).
var _ sandboxagent.RulesInstaller = (*Driver)(nil)
