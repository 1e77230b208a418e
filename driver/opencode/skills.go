package opencode

import (
	"context"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

var _ sandboxagent.RulesInstaller = (*Driver)(nil)

// InstallRules writes the global AGENTS.md (empty rules remove it).
func (d *Driver) InstallRules(ctx context.Context, c sandboxagent.ContainerOps, rules string) error {
	dir, err := configFiles(ctx, c)
	if err != nil {
		return err
	}
	return kit.InstallRules(ctx, c, dir, "AGENTS.md", rules)
}

var _ sandboxagent.SkillInstaller = (*Driver)(nil)

// InstallSkill writes a skill under the global skills directory,
// replacing one of the same name.
func (d *Driver) InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error {
	dir, err := configFiles(ctx, c)
	if err != nil {
		return err
	}
	return kit.InstallSkill(ctx, c, dir, "skills", s, kit.PlainFiles)
}

// configFiles is opencode's global config directory, written through
// ContainerOps.WriteFile.
func configFiles(ctx context.Context, c sandboxagent.ContainerOps) (kit.OpsDir, error) {
	dir, err := configDir(ctx, c)
	return kit.OpsDir{Driver: "opencode", Root: dir}, err
}
