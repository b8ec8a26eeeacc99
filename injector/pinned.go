package injector

import (
	"regexp"
	"strings"
)

// devBuildTag matches the tags of builds between releases: a commit
// (`git describe --always` of an untagged tree: 9df1e34), the commits since
// a release (v0.1.0-3-g9df1e34), and any of them from a modified tree
// (-dirty), which is what the Makefile stamps into contract.Version and so
// into DefaultSupervisorImage() outside a release.
var devBuildTag = regexp.MustCompile(`^([0-9a-f]{7,40}|.+-g[0-9a-f]{7,40})(-dirty)?$|-dirty$`)

// UnpinnedImage says why a pod given the supervisor image image may not run
// the supervisor the injector was built for, or "" when it will: image is
// pinned by digest, or tagged with anything but a development build's tag
// (a commit, dev), a moving one (latest) or none. The webhook and inject
// warn with it; nothing refuses such an image, since a registry of one's
// own may well hold it.
func UnpinnedImage(image string) string {
	if strings.Contains(image, "@") {
		return ""
	}
	last := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(last, ":")
	switch {
	case !ok || tag == "":
		return "it has no tag (latest, which moves)"
	case tag == "latest":
		return "its tag latest moves"
	case tag == "dev":
		return "its tag dev names a development build"
	case devBuildTag.MatchString(tag):
		return "its tag " + tag + " names a development build (a git commit)"
	}
	return ""
}

// UnpinnedWarning is the one line the webhook and inject print when
// UnpinnedImage(image) is not "".
func UnpinnedWarning(image, why string) string {
	return "supervisor image " + image + " is not pinned: " + why +
		"; pin it by digest (--supervisor-image REPO@sha256:…) or use a release tag (v0.x.y)"
}
