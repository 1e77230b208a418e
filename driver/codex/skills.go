package codex

import (
	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Skills and rules: kit.Instructions, embedded in Driver. Rules are
// $CODEX_HOME/AGENTS.md, codex's global instructions; skills
// $CODEX_HOME/skills/<name>/, a file that starts with "#!" made
// executable.
var (
	_ sandboxagent.SkillInstaller = (*Driver)(nil)
	_ sandboxagent.RulesInstaller = (*Driver)(nil)
)

// instructions installs rules and skills in codex's home.
func (d *Driver) instructions() kit.Instructions {
	return kit.Instructions{Files: d.sh(), RulesFile: "AGENTS.md", SkillsDir: "skills", Mode: kit.ExecScripts}
}
