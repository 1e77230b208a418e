package claude

import (
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Rules are the user-global ~/.claude/CLAUDE.md, skills
// ~/.claude/skills/<name>/ (relative to $HOME).
const (
	rulesFile = ".claude/CLAUDE.md"
	skillsDir = ".claude/skills"
)

// Skills and rules: kit.Instructions, embedded in Driver.
var (
	_ sandboxagent.SkillInstaller = (*Driver)(nil)
	_ sandboxagent.RulesInstaller = (*Driver)(nil)
)

// instructions installs rules and skills as the sandbox's user.
func instructions() kit.Instructions {
	return kit.Instructions{Files: sh, RulesFile: rulesFile, SkillsDir: skillsDir, Mode: kit.PlainFiles}
}
