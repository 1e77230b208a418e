// Package kit is what the drivers share: running small sh scripts in the
// sandbox through ContainerOps.Run (Shell), writing and removing the CLI's
// files as the sandbox's user (Files), installing skills and rules,
// checking session ids and running session scripts (SessionIDs), parsing
// session listings, and the common steps of the JSON-lines parsers
// (Blank, Decode, Raw, ToolArgs).
//
// A driver declares its Shell (its name, for errors, and the directory its
// files live in) and its SessionIDs once, and builds its optional
// behaviours (Forker, SkillInstaller, RulesInstaller, SessionStore) from
// these pieces. Nothing here validates a Skill again (Agent.InstallSkill
// did); InstallSkill only refuses paths that would leave the skill's
// folder.
package kit
