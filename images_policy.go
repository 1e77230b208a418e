package sandboxagent

import (
	"context"
	"fmt"
)

// ImagePolicy says what happens when a sandbox's image is not in the
// engine (config key image_policy).
type ImagePolicy string

const (
	// ImagePullOrBuild pulls the image from its registry and, when no
	// registry has it (or none answers), builds it from the Dockerfiles
	// embedded in the binary — for the agent images. The default.
	ImagePullOrBuild ImagePolicy = "pull-or-build"
	// ImagePull only pulls.
	ImagePull ImagePolicy = "pull"
	// ImageNever uses only what the engine has.
	ImageNever ImagePolicy = "never"
)

// ParseImagePolicy checks a policy name ("" is the default).
func ParseImagePolicy(s string) (ImagePolicy, error) {
	switch p := ImagePolicy(s); p {
	case "":
		return ImagePullOrBuild, nil
	case ImagePullOrBuild, ImagePull, ImageNever:
		return p, nil
	}
	return "", fmt.Errorf("%w: image policy %q (want pull-or-build, pull or never)", ErrInvalidArgument, s)
}

// ImageSource makes a missing image present in the engine (pull, build).
// NewSandbox calls it when the engine reports the sandbox's image
// missing, then creates the container again. The images package's
// Provider is the implementation the command line uses.
type ImageSource interface {
	ProvideImage(ctx context.Context, ref string) error
}

// ImageChecker is an ImageSource that also vets an image the engine
// already has (image_verify strict: its digest must be the released one).
// NewSandbox calls it before creating the container.
type ImageChecker interface {
	CheckImage(ctx context.Context, ref string) error
}
