package drivertest

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// RulesSkillsDriver installs rules and skills.
type RulesSkillsDriver interface {
	InstallRules(ctx context.Context, c sandboxagent.ContainerOps, rules string) error
	InstallSkill(ctx context.Context, c sandboxagent.ContainerOps, s sandboxagent.Skill) error
}

// CheckRulesAndSkills installs rules and a skill with d into ops and
// checks that the rules land in the file rules and the skill's files in
// the folder skills/<name> (both relative to ops.Home); that installing
// rules again replaces them, and empty rules remove the file; that
// reinstalling a skill replaces its whole folder; and that a skill whose
// name or file leaves its folder is ErrInvalidArgument (the rest of
// Skill.Validate is Agent.InstallSkill's job). It returns the skill it
// installed last.
func CheckRulesAndSkills(t *testing.T, d RulesSkillsDriver, ops *HostOps, rules, skills string) sandboxagent.Skill {
	t.Helper()
	ctx := context.Background()
	for _, r := range []string{"be brief\n", "Always answer in French.\n"} {
		if err := d.InstallRules(ctx, ops, r); err != nil {
			t.Fatal(err)
		}
		if got := ops.Read(t, rules); got != r {
			t.Errorf("rules %q, want %q", got, r)
		}
	}
	if err := d.InstallRules(ctx, ops, ""); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ops.HomePath(rules)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty rules: the file holds %q (%v); want it removed", b, err)
	}
	sk := sandboxagent.Skill{Name: "demo", Files: map[string][]byte{
		"SKILL.md":          []byte("---\nname: demo\ndescription: ships it\n---\nbody\n"),
		"scripts/run.sh":    []byte("#!/bin/sh\necho hi\n"),
		"refs/a b/ü it.txt": []byte("odd name"),
		"reference/a/b.txt": {},
	}}
	if err := d.InstallSkill(ctx, ops, sk); err != nil {
		t.Fatal(err)
	}
	for n, want := range sk.Files {
		if got := ops.Read(t, path.Join(skills, sk.Name, n)); got != string(want) {
			t.Errorf("%s: %q", n, got)
		}
	}
	sk.Files = map[string][]byte{"SKILL.md": []byte("---\nname: demo\ndescription: v2\n---\n")}
	if err := d.InstallSkill(ctx, ops, sk); err != nil {
		t.Fatal(err)
	}
	if got := ops.Read(t, path.Join(skills, "demo/SKILL.md")); got != string(sk.Files["SKILL.md"]) {
		t.Errorf("reinstalled SKILL.md %q", got)
	}
	for _, old := range []string{"scripts", "refs", "reference"} {
		if _, err := os.Lstat(ops.HomePath(path.Join(skills, "demo", old))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the reinstall kept %s: %v", old, err)
		}
	}
	for _, bad := range []sandboxagent.Skill{
		{Name: "../x", Files: map[string][]byte{"SKILL.md": nil}},
		{Name: "..", Files: map[string][]byte{"SKILL.md": nil}},
		{Name: "x", Files: map[string][]byte{"SKILL.md": nil, "../y": nil}},
	} {
		if err := d.InstallSkill(ctx, ops, bad); !errors.Is(err, sandboxagent.ErrInvalidArgument) {
			t.Errorf("skill %q with %d files: %v", bad.Name, len(bad.Files), err)
		}
	}
	return sk
}

// CheckBasics checks a driver's name and default image (""), that its
// secrets are exactly the API key it was given, and that a driver
// without a key (withoutKey) has none.
func CheckBasics(t *testing.T, withKey, withoutKey sandboxagent.Driver, name, key string) {
	t.Helper()
	if withKey.Name() != name || withKey.Image() != "" || withoutKey.Name() != name {
		t.Errorf("name %q image %q", withKey.Name(), withKey.Image())
	}
	if s := withKey.Secrets(); len(s) != 1 || s[0] != key {
		t.Errorf("secrets %q, want the key", s)
	}
	if s := withoutKey.Secrets(); s != nil {
		t.Errorf("secrets without a key %q", s)
	}
}

// SessionDriver has the session members (asserted on a concrete driver).
type SessionDriver interface {
	Fork(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error)
	DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error
	DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error)
}

// CheckSessionGone checks that the session id, deleted or never made, is
// gone for every member: delete, dump and fork fail with ErrPathNotFound.
func CheckSessionGone(t *testing.T, d SessionDriver, ops sandboxagent.ContainerOps, id string) {
	t.Helper()
	ctx := context.Background()
	if err := d.DeleteSession(ctx, ops, id); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("delete of %s: %v", id, err)
	}
	if _, err := d.DumpSession(ctx, ops, id); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("dump of %s: %v", id, err)
	}
	if _, err := d.Fork(ctx, ops, id); !errors.Is(err, sandboxagent.ErrPathNotFound) {
		t.Errorf("fork of %s: %v", id, err)
	}
}

// CheckInvocation checks what a driver's Command made of turn: the
// prompt on stdin, the turn's working directory, env holding want (and
// nothing else when exact) and none of absent, and secret (when not
// empty) in no argument.
func CheckInvocation(t *testing.T, inv sandboxagent.Invocation, turn sandboxagent.Turn, want map[string]string, absent []string, exact bool, secret string) {
	t.Helper()
	if string(inv.Stdin) != turn.Prompt {
		t.Errorf("stdin %q, want the prompt", inv.Stdin)
	}
	if inv.WorkDir != turn.WorkDir {
		t.Errorf("workdir %q, want %q", inv.WorkDir, turn.WorkDir)
	}
	for k, v := range want {
		if got, ok := inv.Env[k]; !ok || got != v {
			t.Errorf("env %s=%q, want %q", k, got, v)
		}
	}
	if exact && len(inv.Env) != len(want) {
		t.Errorf("env\n got %v\nwant %v", inv.Env, want)
	}
	for _, k := range absent {
		if _, ok := inv.Env[k]; ok {
			t.Errorf("env has %s", k)
		}
	}
	for _, a := range inv.Cmd {
		if secret != "" && strings.Contains(a, secret) {
			t.Errorf("the key is on the command line: %q", inv.Cmd)
		}
	}
}
