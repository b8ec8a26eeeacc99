package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// The version scheme (README, "Versions"): one semver vMAJOR.MINOR.PATCH
// names a release everywhere. contract.Version (what an unstamped binary
// reports, and the tag it installs) is the release the tree is prepared
// for; the chart's appVersion is that version and its version the same
// without the v; the images of deploy/ are tagged with it; a release tag
// on a commit names that version; and the Makefile stamps the binaries,
// and so the images' tags, through contract.Version.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

const root = "../.."

func TestVersionsAgree(t *testing.T) {
	if !semver.MatchString(contract.Version) {
		t.Fatalf("contract.Version %q is not vMAJOR.MINOR.PATCH", contract.Version)
	}
	b, err := os.ReadFile(filepath.Join(root, "charts/restart-injector/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != contract.Version || chart.Version != strings.TrimPrefix(contract.Version, "v") {
		t.Errorf("Chart.yaml: version %q, appVersion %q; contract.Version %q wants %q and %q",
			chart.Version, chart.AppVersion, contract.Version, strings.TrimPrefix(contract.Version, "v"), contract.Version)
	}

	// deploy/ pins its images with the same tag.
	image := regexp.MustCompile(`ghcr\.io/restart-supervisor/(restart-supervisor|restart-injector):([^\s"']+)`)
	var seen int
	filepath.WalkDir(filepath.Join(root, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range image.FindAllStringSubmatch(string(b), -1) {
			seen++
			if m[2] != contract.Version {
				t.Errorf("%s: %s, want tag %s", p, m[0], contract.Version)
			}
		}
		return nil
	})
	if seen < 2 {
		t.Errorf("deploy/ names %d release images, want both", seen)
	}

	// The Makefile stamps contract.Version, and images take that VERSION.
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-X github.com/restart-supervisor/restart-supervisor/contract.Version=$(VERSION)",
		"go run ./hack/images build --bin $(IMAGE_BIN) --ca-bundle $(CA_BUNDLE) --version $(VERSION)",
	} {
		if !strings.Contains(string(mk), want) {
			t.Errorf("Makefile lacks %q", want)
		}
	}

	// A release tag on this commit names the version the tree carries.
	out, err := exec.Command("git", "-C", root, "tag", "--points-at", "HEAD", "--list", "v*").Output()
	if err != nil {
		t.Logf("git tag: %v (no repository: tags not checked)", err)
		return
	}
	for _, tag := range strings.Fields(string(out)) {
		if semver.MatchString(tag) && tag != contract.Version {
			t.Errorf("HEAD is tagged %s but contract.Version is %s", tag, contract.Version)
		}
	}
}
