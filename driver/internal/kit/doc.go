// Package kit is what the drivers share: running small sh scripts in the
// sandbox through ContainerOps.Run (Shell), writing and removing the CLI's
// files as the sandbox's user (Files), installing skills and rules,
// checking session ids and running session scripts (SessionIDs), parsing
// session listings, the common steps of the JSON-lines parsers (Blank,
// Decode, Raw, ToolArgs, ToolResultText), and a failed turn's DriverError
// (Failure, with the one message rule, Message, and the one HTTP-status
// sniffer, HTTPStatus).
//
// A driver declares its Shell (its name, for errors, and the directory its
// files live in) and its SessionIDs once, and builds its optional
// behaviours (Forker, SkillInstaller, RulesInstaller, SessionStore) from
// these pieces. Its shell programs live in driver/<cli>/scripts/*.sh,
// embedded (as this package's own scripts/write.sh), so that shellcheck
// lints them; values reach them as arguments, never spliced into the text.
// Nothing here validates a Skill again (Agent.InstallSkill did);
// InstallSkill only refuses paths that would leave the skill's folder.
package kit
