package catalog

import "fmt"

// Policy says what happens when a sandbox's image is not in the
// engine (config key image_policy).
type Policy string

const (
	// PolicyPullOrBuild pulls the image from its registry and, when no
	// registry has it (or none answers), builds it from the Dockerfiles
	// embedded in the binary — for the agent images. The default.
	PolicyPullOrBuild Policy = "pull-or-build"
	// PolicyPull only pulls.
	PolicyPull Policy = "pull"
	// PolicyNever uses only what the engine has.
	PolicyNever Policy = "never"
)

// ParsePolicy checks a policy name ("" is the default).
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return PolicyPullOrBuild, nil
	case PolicyPullOrBuild, PolicyPull, PolicyNever:
		return p, nil
	}
	return "", fmt.Errorf("%w: image policy %q (want pull-or-build, pull or never)", ErrInvalidArgument, s)
}

// Verify says whether images are checked against the digests recorded
// at release (digests.json): config key image_verify.
type Verify string

const (
	// VerifyOff checks nothing (the default; "" means the same).
	VerifyOff Verify = "off"
	// VerifyStrict refuses an image unless this binary recorded a
	// digest for its tag and the local image carries that digest for its
	// repository (the engine records one when it pushes or pulls it).
	VerifyStrict Verify = "strict"
)

// ParseVerify parses an image_verify value ("" is off).
func ParseVerify(s string) (Verify, error) {
	switch v := Verify(s); v {
	case "", VerifyOff:
		return VerifyOff, nil
	case VerifyStrict:
		return v, nil
	}
	return VerifyOff, fmt.Errorf("%w: image_verify %q (want off or strict)", ErrInvalidArgument, s)
}
