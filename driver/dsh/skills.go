package dsh

import (
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Skills and rules: kit.Instructions, embedded in Driver. Rules are the
// user-global $DSH_HOME/AGENTS.md, skills $DSH_HOME/skills/<name>/.
var (
	_ sandboxagent.SkillInstaller = (*Driver)(nil)
	_ sandboxagent.RulesInstaller = (*Driver)(nil)
)

// instructions installs rules and skills in $DSH_HOME.
func instructions() kit.Instructions {
	return kit.Instructions{Files: sh, RulesFile: rulesFile, SkillsDir: skillsDir, Mode: kit.PlainFiles}
}
